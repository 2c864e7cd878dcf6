// DecodeScope step view: one script shared by every step view (Gradio gr.HTML and the HTML report).
// Each .ds-stepper element carries the run ONCE as compact JSON inside <div class="ds-data" hidden> (not a
// <script>: Gradio warns on those): per step its query (tokens, positions, parents, roles as letters, slots),
// the info fields the views read and a caption; the vocabulary; the palette (viz/palette.py). views.js draws
// the chosen step's window, pool, tree, mask and cost panel (HTML tables, SVG, plotly), so the page stays
// small and a step change costs a few milliseconds; this file holds the controls and the linking.
(function () {
  if (window.DecodeScope) return;
  const DS = (window.DecodeScope = {});
  // On a touch screen plotly's toolbar covers the chart titles: off there, shown on hover elsewhere.
  const TOUCH = window.matchMedia && window.matchMedia("(pointer: coarse)").matches;
  const CONFIG = { displaylogo: false, responsive: true, displayModeBar: TOUCH ? false : "hover" };
  const { VIEWS, profileView } = window.DecodeScopeViews; // views.js, loaded just before this script
  let active = null; // the stepper that keyboard arrows drive
  function initialStep(root, n) {
    const m = /step=(\d+)/.exec(window.location.hash || "");
    const v = m ? parseInt(m[1], 10) : parseInt(root.dataset.initial || "0", 10);
    return Math.max(0, Math.min(n - 1, isNaN(v) ? 0 : v));
  }

  DS.mount = function (root) {
    // Keyed by the fragment's id: a host that patches the old element in place (same node, new id and
    // content) gets the new run mounted too. Handlers are properties, so a re-mount replaces them.
    if (root.__ds === root.id) return;
    const node = root.querySelector(".ds-data");
    if (!node) return;
    if (root.__ds_stop) root.__ds_stop();
    root.__ds = root.id;
    const host = root.parentElement && root.parentElement.closest(".ds-stale");  // a new run has arrived
    if (host) host.classList.remove("ds-stale");
    const D = JSON.parse(node.textContent), steps = D.steps, n = steps.length;
    const q = (sel) => root.querySelector(sel);
    const slider = q(".ds-slider"), label_ = q(".ds-label"), caption = q(".ds-caption"), playBtn = q(".ds-play");
    slider.max = String(n - 1);
    let cur = 0, timer = null, sel = null, mode = "origin";

    // Run-level figures are drawn once; the current step is marked on them at every change.
    Object.entries(D.run || {}).forEach(([name, fig]) => {
      const div = q(`.ds-run-plot[data-view="${name}"]`);
      if (!div || !window.Plotly) return;
      if (D.marks[name] === "point") fig.data.push({ x: [], y: [], mode: "markers", name: "current step", hoverinfo: "skip",
        marker: { size: 16, color: "rgba(0,0,0,0)", line: { color: D.palette.current, width: 3 } } });
      window.Plotly.react(div, fig.data, fig.layout, CONFIG);
    });

    function markRun(stepIndex) {
      Object.keys(D.run || {}).forEach((name) => {
        const div = q(`.ds-run-plot[data-view="${name}"]`);
        if (!div || !div.data || !window.Plotly) return;
        if (D.marks[name] === "xline") {
          window.Plotly.relayout(div, { shapes: [{ type: "line", xref: "x", yref: "paper", x0: stepIndex, x1: stepIndex,
            y0: 0, y1: 1, line: { color: D.palette.current, width: 2 } }] });
        } else {
          const p = (D.points[name] || {})[stepIndex];
          window.Plotly.restyle(div, { x: [p ? [p[0]] : []], y: [p ? [p[1]] : []] }, [div.data.length - 1]);
        }
      });
    }

    function outline() {
      root.querySelectorAll(".ds-selcell").forEach((e) => e.classList.remove("ds-selcell"));
      if (sel !== null) root.querySelectorAll(`.ds-plot [data-pos="${sel}"]`).forEach((e) => e.classList.add("ds-selcell"));
    }

    function go(i) {
      cur = Math.max(0, Math.min(n - 1, i));
      const s = steps[cur];
      slider.value = String(cur);
      // the header's counts (viz/counts.py): "the prefill + 47 decode steps" above "step 1 / 47"
      const last = D.counts && D.counts.prefill ? D.counts.decode_steps : steps[n - 1].i;
      label_.textContent = `step ${s.i} / ${last}` + (s.k === "prefill" ? " · prefill" : "");
      caption.textContent = s.cap;
      draw(s);
      root.querySelectorAll(".ds-text .ds-tok").forEach((t) => {
        const st = t.dataset.step === "" ? -1 : parseInt(t.dataset.step, 10);
        t.classList.toggle("ds-cur", st === s.i);
        t.classList.toggle("ds-future", st > s.i);
        t.classList.toggle("ds-sel", sel !== null && parseInt(t.dataset.pos, 10) === sel);
      });
      outline();
      reveal();
      cues();
      markRun(s.i);
      try { profileView(root, D, s); } catch (e) { /* a malformed cost record: the panel keeps its last step */ }
      root.dataset.step = String(s.i);
      root.dispatchEvent(new CustomEvent("ds-step", { detail: s.i, bubbles: true }));
    }

    // The step's pictures. In presentation mode the tree and the mask are drawn in projector type for their box
    // (>= 20 px at 1920 wide, >= 16 px below 1600: read from the back of a room), cut to fit (views.js presentView).
    let drawnFor = "";
    function draw(s) {
      const on = root.classList.contains("ds-present"), F = window.innerWidth > 1600 ? 21 : 17;
      drawnFor = on ? `${window.innerWidth}` : "";
      D.views.forEach((v) => {
        const box = q(`.ds-plot[data-view="${v}"]`);
        if (!box) return;
        const W = box.querySelector(".ds-scroll").clientWidth;
        let title, body;
        try { [title, body] = on && W > 0 ? DecodeScopeViews.presentView(D, s, v, W, F) : VIEWS[v](D, s); }
        catch (e) { [title, body] = [`Step ${s.i}: this view cannot be drawn (the trace is malformed)`, ""]; }
        box.querySelector(".ds-vt").textContent = title;
        box.querySelector(".ds-scroll").innerHTML = body;  // views.js escapes every trace value in it
      });
      outline();
    }
    // The token box scrolls on its own (~220 px): keep the current step's first token in view, scrolling
    // only that box (never the page), so next ▶ / play visibly move.
    // The first token sits a third of the way down, or higher when the step's tokens need the room below it.
    function reveal() {
      const box = q(".ds-text"), all = box ? box.querySelectorAll(".ds-tok.ds-cur") : [];
      if (!all.length) return;
      const b = box.getBoundingClientRect(), r = all[0].getBoundingClientRect(), end = all[all.length - 1].getBoundingClientRect();
      const room = Math.max(4, Math.min(box.clientHeight / 3, box.clientHeight - (end.bottom - r.top) - 8));
      if (r.top < b.top + 4 || end.bottom > b.bottom - 4) box.scrollTop += r.top - b.top - room;
    }
    // Presentation mode opens on the step, not the page's top: the caption, the step's tokens and its first
    // picture below the sticky controls; on a short screen (1280x720) the tokens and the picture, the caption above.
    function present() {
      reveal();
      const ctl = q(".ds-controls"), plot = q(".ds-grid > .ds-plot"), top = root.getBoundingClientRect().top;
      const at = (e) => e.getBoundingClientRect().top - top + root.scrollTop;
      const under = ctl ? ctl.offsetHeight + 6 : 0, end = plot ? plot.getBoundingClientRect().bottom - top + root.scrollTop : 0;
      const cap = q(".ds-caption"), text = q(".ds-text");
      const first = [cap, text].find((e) => e && end - (at(e) - under) <= root.clientHeight) || text || cap;
      if (first) root.scrollTop = Math.max(0, at(first) - under);
    }
    // Every view wider than its box says so ("scroll →" in its title); in presentation mode a table wider
    // than the screen (a long trajectory at 1280 px) is scaled to its box instead: nothing scrolls sideways.
    function cues() {
      root.querySelectorAll(".ds-scroll").forEach((el) => {
        const box = el.closest(".ds-plot"), table = el.firstElementChild;
        if (table && table.tagName === "TABLE") {
          table.style.zoom = "";
          if (root.classList.contains("ds-present") && el.scrollWidth > el.clientWidth + 1)
            table.style.zoom = (el.clientWidth / el.scrollWidth - 0.005).toFixed(3);
        }
        if (box) box.classList.toggle("ds-overflows", el.scrollWidth > el.clientWidth + 1);
      });
    }

    function recolour() {
      root.querySelectorAll(".ds-text .ds-tok").forEach((t) => {
        if (!t.dataset.bg) t.dataset.bg = t.style.background;
        const st = t.dataset.step;
        t.style.background = mode === "step" && st !== "" ? D.palette.step[parseInt(st, 10) % D.palette.step.length] : t.dataset.bg;
      });
    }

    function select(t) {
      const pos = parseInt(t.dataset.pos, 10);
      sel = sel === pos ? null : pos;
      q(".ds-selinfo").textContent = sel === null ? "" :
        `selected ${JSON.stringify(t.textContent)} at position ${pos}: ` +
        (t.dataset.step ? `step ${t.dataset.step}, origin ${t.dataset.origin}` : "prompt") +
        " (outlined in every view; click again or Esc to clear)";
    }

    function stop() { if (timer) { clearInterval(timer); timer = null; playBtn.textContent = "▶ play"; } }
    function play() {
      if (timer) return stop();
      if (cur >= n - 1) go(0);
      playBtn.textContent = "❚❚ pause";
      timer = setInterval(() => { if (cur >= n - 1) stop(); else go(cur + 1); }, 900);
    }

    q(".ds-first").onclick = () => { stop(); go(0); };
    q(".ds-prev").onclick = () => { stop(); go(cur - 1); };
    q(".ds-next").onclick = () => { stop(); go(cur + 1); };
    q(".ds-last").onclick = () => { stop(); go(n - 1); };
    playBtn.onclick = play;
    const X = window.DecodeScopeExport;  // export.js, loaded before this script
    q(".ds-svg").onclick = () => X.saveSVG(root);
    q(".ds-png").onclick = () => X.savePNG(root, 2);
    const slides = q(".ds-slides");
    if (slides) slides.onclick = () => { stop(); X.saveSlides(root, n, go, cur); };
    q(".ds-present").onclick = () => { active = root; X.present(root); };
    slider.oninput = () => { stop(); go(parseInt(slider.value, 10)); };
    // Delegated clicks: a token selects its step (linked views); the mode buttons recolour the text.
    root.onclick = (e) => {
      const b = e.target.closest && e.target.closest(".ds-mode");
      if (b) {
        mode = b.dataset.mode;
        root.querySelectorAll(".ds-mode").forEach((x) => x.classList.toggle("ds-on", x === b));
        recolour();
        return;
      }
      const t = e.target.closest && e.target.closest(".ds-text .ds-tok");
      if (!t) return;
      select(t);
      const k = t.dataset.step ? D.index_of[parseInt(t.dataset.step, 10)] : undefined;
      stop();
      go(k !== undefined ? k : cur);
    };
    root.onkeydown = (e) => key(e);
    root.onpointerdown = () => { active = root; };
    root.__ds_stop = stop;
    // Another view (side by side) moves this one to a recorded step index.
    root.__ds_goto = (i) => { if (D.index_of[i] !== undefined) { stop(); go(D.index_of[i]); } };
    root.__ds_key = (e) => {
      if (e.key === "ArrowRight") { stop(); go(cur + 1); }
      else if (e.key === "ArrowLeft") { stop(); go(cur - 1); }
      else if (e.key === "Home") { stop(); go(0); }
      else if (e.key === "End") { stop(); go(n - 1); }
      else if (e.key === " ") play();
      else if (e.key === "Escape" && root.classList.contains("ds-present")) window.DecodeScopeExport.present(root, false);
      else if (e.key === "Escape" && sel !== null) { sel = null; q(".ds-selinfo").textContent = ""; go(cur); }
      else return false;
      return true;
    };
    if (!active) active = root;
    const m = /pos=(\d+)/.exec(window.location.hash || "");  // #step=6&pos=23 preselects a token
    const pre = m && root.querySelector(`.ds-text .ds-tok[data-pos="${m[1]}"]`);
    if (pre) select(pre);
    // A host may ask for one step once (the lesson: "best" = the step its narration points at, with a note).
    const ask = root.parentElement && root.parentElement.closest("[data-ds-goto]");
    let start = initialStep(root, n);
    if (ask) {
      const want = ask.getAttribute("data-ds-goto"), sideSel = ask.getAttribute("data-ds-side");
      ask.removeAttribute("data-ds-goto");
      // a host's narration (the lesson) beside the views: a copy of its node in the view's side column
      const src = sideSel ? document.querySelector(sideSel) : null;
      if (src && !q(".ds-side")) {
        const side = document.createElement("aside");
        side.className = "ds-side";
        side.appendChild(src.cloneNode(true)).removeAttribute("id");
        root.insertBefore(side, root.firstChild);
        root.classList.add("ds-sided");
        document.body.classList.add("ds-narration-beside");  // the host hides its own copy: said once, beside the view
      }
      if (want === "best" && D.pick && steps[D.pick.k]) {  // the step the narration points at (viz/exports/teach.py)
        start = D.pick.k;
        const note = q(".ds-pick");
        if (note) { note.textContent = D.pick.shows; note.hidden = false; note.classList.toggle("ds-missing", !D.pick.found); }
      }
      else if (D.index_of[parseInt(want, 10)] !== undefined) start = D.index_of[parseInt(want, 10)];
    }
    // A host may open a finished run on the step that shows the method's point (the Run tab), saying so.
    if (!ask && root.dataset.initial === "best" && !/step=\d/.test(window.location.hash || "") && D.pick && steps[D.pick.k]) {
      start = D.pick.k;
      const note = q(".ds-pick");
      if (note) { note.textContent = D.pick.shows; note.hidden = false; note.classList.toggle("ds-missing", !D.pick.found); }
    }
    go(start);
    if (ask) requestAnimationFrame(() => root.scrollIntoView({ block: "start" }));  // narration and picture in view
    // entering or leaving presentation mode, or a new screen width there: the pictures are redrawn for it
    if (window.ResizeObserver) new ResizeObserver(() => {
      const want = root.classList.contains("ds-present") ? `${window.innerWidth}` : "";
      if (want !== drawnFor) { draw(steps[cur]); if (want) present(); }
      cues();
    }).observe(root);
    // A click on a run-chart point (customdata = step index) jumps to that step; bound once plotly drew.
    root.querySelectorAll(".ds-run-plot").forEach((div) => div.on && (div.removeAllListeners && div.removeAllListeners("plotly_click"), div.on("plotly_click", (ev) => {
      const p = ev.points && ev.points[0];
      const s = p && (p.customdata !== undefined ? (Array.isArray(p.customdata) ? p.customdata[0] : p.customdata) : p.x);
      if (typeof s === "number" && D.index_of[s] !== undefined) { stop(); go(D.index_of[s]); }
    })));
  };

  function key(e) {
    const t = e.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.isContentEditable)) return;
    const root = (t && t.closest && t.closest(".ds-stepper")) || active;
    if (root && root.__ds_key && root.__ds_key(e)) { e.preventDefault(); e.stopPropagation(); }
  }

  DS.mountAll = function (scope) {
    (scope || document).querySelectorAll(".ds-stepper").forEach((r) => DS.mount(r));
    if (window.DecodeScopeSideBySide) window.DecodeScopeSideBySide.mountAll(scope);
  };
  // A host element (Gradio's gr.HTML) whose content is replaced later: mount whatever lands in it. Gradio
  // runs its `watch` callbacks before the new HTML is in the DOM, so watching the element itself is what
  // catches the second run's view (a document-wide observer does not see inside a shadow root).
  DS.watch = function (el) {
    DS.mountAll(el);
    if (el.__ds_obs) return;
    el.__ds_obs = new MutationObserver(() => DS.mountAll(el));
    el.__ds_obs.observe(el, { childList: true, subtree: true, attributes: true, attributeFilter: ["id"] });
  };
  document.addEventListener("keydown", (e) => { if (!e.defaultPrevented && !(e.target && e.target.closest && e.target.closest(".ds-stepper"))) key(e); });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", () => DS.mountAll());
  else DS.mountAll();
  new MutationObserver(() => DS.mountAll()).observe(document.documentElement, { childList: true, subtree: true });
})();
