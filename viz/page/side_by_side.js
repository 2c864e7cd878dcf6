// Side by side (viz/summaries/side_by_side.py linked_html): every run's token strip aligned by output position, and
// two step views that follow one output position. Click a strip cell, or step either view, and both views
// show the step that produced that position; the strips outline those steps. Each run's step view travels
// as a <template> and is drawn (DecodeScope.mount) only when picked in the left / right menus.
(function () {
  if (window.DecodeScopeSideBySide) return;
  const SBS = (window.DecodeScopeSideBySide = {});
  const SIDES = ["left", "right"];
  const num = (v) => parseInt(v, 10);

  SBS.mount = function (box) {
    if (box.__sbs === box.id) return;  // keyed by id: a host that patches the node in place re-mounts
    box.__sbs = box.id;
    let pos = null, syncing = false, ready = false;
    const q = (sel) => box.querySelector(sel);
    const col = (side) => q(`.ds-sbs-col[data-side="${side}"]`);
    const runOf = (side) => q(`.ds-sbs-pick[data-side="${side}"]`).value;
    const viewOf = (side) => col(side).querySelector(".ds-stepper");
    const cells = (run) => [...box.querySelectorAll(".ds-sbs-row")].filter((r) => r.dataset.run === run)
      .flatMap((r) => [...r.querySelectorAll(".ds-sbs-cell")]);
    const cellAt = (run, p) => cells(run).find((c) => num(c.dataset.start) <= p && p < num(c.dataset.start) + num(c.dataset.len));
    const cellOfStep = (run, s) => cells(run).find((c) => num(c.dataset.step) === s);

    function show(side) {
      const c = col(side), run = runOf(side);
      const t = [...box.querySelectorAll("template.ds-sbs-t")].find((x) => x.dataset.run === run);
      c.innerHTML = "";
      if (!t) return;
      const frag = t.content.cloneNode(true), root = frag.querySelector(".ds-stepper");
      root.id = `${root.id}-${side}`;  // the same run may sit on both sides
      c.appendChild(frag);
      syncing = true;  // its first step is not a user's step: the pair keeps its position
      try { if (window.DecodeScope) window.DecodeScope.mount(root); } finally { syncing = false; }
    }

    function into(c) {  // scroll the strips' own box (never the page) so the cell is visible
      const sc = c.closest("div[style*='overflow-x']");
      if (sc && (c.offsetLeft < sc.scrollLeft || c.offsetLeft + c.offsetWidth > sc.scrollLeft + sc.clientWidth))
        sc.scrollLeft = c.offsetLeft - sc.clientWidth / 3;
    }

    function mark() {
      box.querySelectorAll(".ds-sbs-cur, .ds-sbs-span").forEach((e) => {
        e.classList.remove("ds-sbs-cur", "ds-sbs-span"); e.style.outline = ""; });
      let lo = Infinity, hi = -1;
      const cur = SIDES.map((side) => {
        const v = viewOf(side), c = v && cellOfStep(runOf(side), num(v.dataset.step));
        if (c) { lo = Math.min(lo, num(c.dataset.start)); hi = Math.max(hi, num(c.dataset.start) + num(c.dataset.len) - 1); }
        return c;
      });
      if (hi < 0) return;
      // The positions the two current steps cover, and how many steps each picked run spent on them.
      const words = [];
      SIDES.forEach((side, k) => {
        const run = runOf(side);
        if (k === 1 && run === runOf("left")) return;
        const span = cells(run).filter((c) => num(c.dataset.start) <= hi && num(c.dataset.start) + num(c.dataset.len) - 1 >= lo);
        span.forEach((c) => { c.classList.add("ds-sbs-span"); c.style.outline = `2px dashed ${box.dataset.current}`; });
        words.push(`${run} ${span.length} step${span.length === 1 ? "" : "s"}`);
      });
      cur.forEach((c) => { if (c) { c.classList.add("ds-sbs-cur"); c.style.outline = `3px solid ${box.dataset.current}`; into(c); } });
      const say = q(".ds-sbs-say");
      if (say) say.textContent = `output position${hi > lo ? "s" : ""} ${lo}${hi > lo ? "–" + hi : ""}: ` + words.join(", ");
    }

    function goPos(p) {
      pos = p;
      syncing = true;
      try {
        SIDES.forEach((side) => {
          const v = viewOf(side), c = cellAt(runOf(side), p);
          if (v && c && v.__ds_goto) v.__ds_goto(num(c.dataset.step));
        });
      } finally { syncing = false; }
      mark();
    }
    box.__sbs_goPos = goPos;

    box.addEventListener("click", (e) => {
      const c = e.target.closest && e.target.closest(".ds-sbs-cell");
      if (c) goPos(num(c.dataset.start));
    });
    box.addEventListener("ds-step", (e) => {  // a view was stepped: the other follows its position
      if (syncing || !ready) return;
      const v = e.target.closest && e.target.closest(".ds-stepper"), side = v && v.closest(".ds-sbs-col");
      const c = side && cellOfStep(runOf(side.dataset.side), e.detail);
      const follow = q(".ds-sbs-follow");
      if (c && (!follow || follow.checked)) goPos(num(c.dataset.start));
      else mark();
    });
    box.querySelectorAll(".ds-sbs-pick").forEach((s) => {
      s.onchange = () => { show(s.dataset.side); if (pos !== null) goPos(pos); else mark(); };
    });
    SIDES.forEach(show);
    ready = true;
    const first = cells(runOf("right")).find((c) => num(c.dataset.len) > 1);  // open on a multi-token step
    if (first) goPos(num(first.dataset.start)); else mark();
  };

  SBS.mountAll = function (scope) {
    (scope || document).querySelectorAll(".ds-sbs-linked").forEach((b) => SBS.mount(b));
  };
})();
