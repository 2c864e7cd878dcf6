// DecodeScope step controls: one script shared by every step view (Gradio gr.HTML and the HTML report).
// Each .ds-stepper element carries its data (per-step plotly figures, captions) as JSON inside
// <div class="ds-data" hidden> (not a <script>: Gradio warns on those); this script draws the chosen step into every view.
(function () {
  if (window.DecodeScope) return;
  const DS = (window.DecodeScope = {});
  const CONFIG = { displaylogo: false, responsive: true };
  let active = null; // the stepper that keyboard arrows drive

  // sel = absolute position of the selected token: every box in layout.meta.cells at that position is
  // outlined, so one click shows the token's guesses in the window, its candidate, tree node and mask rows.
  function draw(div, fig, sel) {
    if (!div || !fig || !window.Plotly) return;
    let layout = fig.layout || {};
    const cells = (layout.meta && layout.meta.cells) || [];
    if (sel !== null && sel !== undefined && cells.length) {
      const extra = cells.filter((c) => c[4] === sel).map((c) => ({ type: "rect", x0: c[0], x1: c[1], y0: c[2],
        y1: c[3], line: { color: "#e7298a", width: 3 }, fillcolor: "rgba(0,0,0,0)" }));
      layout = Object.assign({}, layout, { shapes: (layout.shapes || []).concat(extra) });
    }
    window.Plotly.react(div, fig.data || [], layout, CONFIG);
  }

  function initialStep(root, n) {
    const m = /step=(\d+)/.exec(window.location.hash || "");
    const v = m ? parseInt(m[1], 10) : parseInt(root.dataset.initial || "0", 10);
    return Math.max(0, Math.min(n - 1, isNaN(v) ? 0 : v));
  }

  DS.mount = function (root) {
    if (root.__ds) return;
    const node = root.querySelector(".ds-data");
    if (!node) return;
    root.__ds = true;
    const data = JSON.parse(node.textContent);
    const steps = data.steps;
    const n = steps.length;
    const q = (sel) => root.querySelector(sel);
    const slider = q(".ds-slider"), label = q(".ds-label"), caption = q(".ds-caption");
    const playBtn = q(".ds-play");
    slider.max = String(n - 1);
    let cur = 0, timer = null, sel = null;

    // Run-level figures are drawn once; the current step is marked on them at every change.
    Object.entries(data.run || {}).forEach(([name, fig]) => {
      const div = q(`.ds-run-plot[data-view="${name}"]`);
      draw(div, fig);
      if (div && div.on) div.on("plotly_click", (ev) => {
        const p = ev.points && ev.points[0];
        const s = p && (p.customdata !== undefined ? (Array.isArray(p.customdata) ? p.customdata[0] : p.customdata) : p.x);
        if (typeof s === "number" && data.index_of[s] !== undefined) go(data.index_of[s]);
      });
    });

    function markRun(stepIndex) {
      Object.keys(data.run || {}).forEach((name) => {
        const div = q(`.ds-run-plot[data-view="${name}"]`);
        if (!div || !div.data || !window.Plotly) return;
        const mark = (data.marks || {})[name];
        if (mark === "xline") {
          window.Plotly.relayout(div, { shapes: [{ type: "line", xref: "x", yref: "paper", x0: stepIndex, x1: stepIndex,
            y0: 0, y1: 1, line: { color: "#d62728", width: 2 } }] });
        } else if (mark === "point") {
          const pts = (data.points || {})[name] || {};
          const p = pts[stepIndex];
          const last = div.data.length - 1;
          window.Plotly.restyle(div, { x: [p ? [p[0]] : []], y: [p ? [p[1]] : []] }, [last]);
        }
      });
    }

    function go(i) {
      cur = Math.max(0, Math.min(n - 1, i));
      const s = steps[cur];
      slider.value = String(cur);
      label.textContent = `step ${s.index} / ${steps[n - 1].index}`;
      caption.textContent = s.caption;
      Object.entries(s.figs).forEach(([name, fig]) => draw(q(`.ds-plot[data-view="${name}"]`), fig, sel));
      root.querySelectorAll(".ds-text .ds-tok").forEach((t) => {
        const st = t.dataset.step === "" ? -1 : parseInt(t.dataset.step, 10);
        t.classList.toggle("ds-cur", st === s.index);
        t.classList.toggle("ds-future", st > s.index);
        t.classList.toggle("ds-sel", sel !== null && parseInt(t.dataset.pos, 10) === sel);
      });
      markRun(s.index);
      root.dataset.step = String(s.index);
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
    slider.oninput = () => { stop(); go(parseInt(slider.value, 10)); };
    // Delegated clicks: a token selects its step (linked views); the mode buttons recolour the text.
    root.addEventListener("click", (e) => {
      const b = e.target.closest && e.target.closest(".ds-mode");
      if (b) {
        q(".ds-text").outerHTML = data.text_html[b.dataset.mode];
        root.querySelectorAll(".ds-mode").forEach((x) => x.classList.toggle("ds-on", x === b));
        go(cur);
        return;
      }
      const t = e.target.closest && e.target.closest(".ds-text .ds-tok");
      if (!t) return;
      select(t);
      const k = t.dataset.step ? data.index_of[parseInt(t.dataset.step, 10)] : undefined;
      stop();
      go(k !== undefined ? k : cur);
    });
    root.addEventListener("keydown", (e) => key(e));
    root.addEventListener("pointerdown", () => { active = root; });
    root.__ds_key = (e) => {
      if (e.key === "ArrowRight") { stop(); go(cur + 1); }
      else if (e.key === "ArrowLeft") { stop(); go(cur - 1); }
      else if (e.key === "Home") { stop(); go(0); }
      else if (e.key === "End") { stop(); go(n - 1); }
      else if (e.key === " ") play();
      else if (e.key === "Escape" && sel !== null) { sel = null; q(".ds-selinfo").textContent = ""; go(cur); }
      else return false;
      return true;
    };
    if (!active) active = root;
    const m = /pos=(\d+)/.exec(window.location.hash || "");  // #step=6&pos=23 preselects a token
    const pre = m && root.querySelector(`.ds-text .ds-tok[data-pos="${m[1]}"]`);
    if (pre) select(pre);
    go(initialStep(root, n));
  };

  function key(e) {
    const t = e.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.isContentEditable)) return;
    const root = (t && t.closest && t.closest(".ds-stepper")) || active;
    if (root && root.__ds_key && root.__ds_key(e)) { e.preventDefault(); e.stopPropagation(); }
  }

  DS.mountAll = function (scope) {
    (scope || document).querySelectorAll(".ds-stepper").forEach((r) => DS.mount(r));
  };
  document.addEventListener("keydown", (e) => { if (!e.defaultPrevented && !(e.target && e.target.closest && e.target.closest(".ds-stepper"))) key(e); });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", () => DS.mountAll());
  else DS.mountAll();
  new MutationObserver(() => DS.mountAll()).observe(document.documentElement, { childList: true, subtree: true });
})();
