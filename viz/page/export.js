// DecodeScope pictures that leave the page: the current step's views as one SVG or PNG file, and a
// presentation mode (full screen, large type, keyboard only). No library: the step's caption and views are
// laid out with the step view's own CSS and written as native SVG (rect, text, the views' own SVG), which
// Inkscape, PowerPoint and Keynote show; the PNG is that SVG drawn on a canvas (2x for projectors).
window.DecodeScopeExport = window.DecodeScopeExport || (function () {
  const SVGNS = "http://www.w3.org/2000/svg";
  // A CSS colour as an SVG paint: [colour, opacity], or null when nothing is painted.
  function paint(c) {
    const m = /rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?\)/.exec(c || "");
    if (!m) return null;
    const a = m[4] === undefined ? 1 : parseFloat(m[4]);
    if (a === 0) return null;
    const hex = "#" + [m[1], m[2], m[3]].map((v) => Math.round(+v).toString(16).padStart(2, "0")).join("");
    return [hex, a];
  }
  const num = (v) => (Math.round(v * 10) / 10).toString();
  const fillAttr = (p, name) => `${name}="${p[0]}"` + (p[1] < 1 ? ` ${name}-opacity="${num(p[1])}"` : "");
  // A laid-out element drawn as native SVG: a <rect> for every painted box (background, border, the green
  // "harvested" ring), a <text> for every line of text at its place, size, weight and colour, and the views'
  // own SVG (tree, mask) copied in place. Why native: HTML inside <foreignObject> is blank in Inkscape,
  // PowerPoint and Keynote. Every text value goes through esc.
  function nativeSVG(box) {
    const o = box.getBoundingClientRect(), out = [];
    const X = (v) => num(v - o.left), Y = (v) => num(v - o.top);
    function rects(el, cs) {
      const r = el.getBoundingClientRect();
      if (!r.width || !r.height) return;
      const bg = paint(cs.backgroundColor), bw = parseFloat(cs.borderTopWidth) || 0;
      const bc = cs.borderTopStyle !== "none" && bw > 0 ? paint(cs.borderTopColor) : null;
      const ring = /(rgba?\([^)]*\))\s+0px\s+0px\s+0px\s+([\d.]+)px/.exec(cs.boxShadow || "");
      if (ring && paint(ring[1])) {
        const k = parseFloat(ring[2]);
        out.push(`<rect x="${X(r.left - k / 2)}" y="${Y(r.top - k / 2)}" width="${num(r.width + k)}" height="${num(r.height + k)}" ` +
          `fill="none" ${fillAttr(paint(ring[1]), "stroke")} stroke-width="${num(k)}"/>`);
      }
      if (!bg && !bc) return;
      const dash = cs.borderTopStyle === "dashed" ? ' stroke-dasharray="4 3"' : "";
      const rx = parseFloat(cs.borderTopLeftRadius) || 0;
      out.push(`<rect x="${X(r.left + bw / 2)}" y="${Y(r.top + bw / 2)}" width="${num(Math.max(r.width - bw, 0))}" ` +
        `height="${num(Math.max(r.height - bw, 0))}"${rx ? ` rx="${num(rx)}"` : ""} ` + (bg ? fillAttr(bg, "fill") : 'fill="none"') +
        (bc ? ` ${fillAttr(bc, "stroke")} stroke-width="${num(bw)}"${dash}` : "") + "/>");
    }
    function line(text, r, cs, pre) {
      const fs = parseFloat(cs.fontSize) || 14, colour = paint(cs.color) || ["#222222", 1];
      const t = pre ? text.replace(/\n+$/, "") : text.replace(/\s+/g, " ").trim();
      if (!t.trim()) return;
      const weight = parseInt(cs.fontWeight, 10) >= 600 ? ' font-weight="bold"' : "";
      const y = r.top + (r.height + fs * 0.7) / 2;  // the baseline of a line box of this height
      out.push(`<text x="${X(r.left)}" y="${Y(y)}" font-family="sans-serif" font-size="${num(fs)}"${weight} ` +
        `${fillAttr(colour, "fill")}${pre ? ' xml:space="preserve"' : ""}>${esc(t)}</text>`);
    }
    function texts(node, cs) {
      const data = node.data, pre = /^pre/.test(cs.whiteSpace), range = document.createRange();
      if (!data.trim()) return;
      range.selectNodeContents(node);
      const all = [...range.getClientRects()].filter((r) => r.width > 0);
      if (all.length <= 1) { if (all.length) line(data, all[0], cs, pre); return; }
      // wrapped text: one <text> per line, the words grouped by the line they were laid out on
      let cur = null;
      const words = /\S+\s*/g;
      for (let m; (m = words.exec(data));) {
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const r = [...range.getClientRects()].filter((q) => q.width > 0)[0];
        if (!r) continue;
        if (cur && Math.abs(r.top - cur.r.top) < 2) { cur.t += m[0]; cur.right = r.right; continue; }
        if (cur) line(cur.t, cur.r, cs, pre);
        cur = { t: m[0], r };
      }
      if (cur) line(cur.t, cur.r, cs, pre);
    }
    function walk(el) {
      const cs = getComputedStyle(el);
      if (cs.display === "none" || cs.visibility === "hidden" || el.tagName === "STYLE") return;
      if (el instanceof SVGSVGElement) {  // the tree or the mask: already SVG, copied at its laid-out size
        const r = el.getBoundingClientRect(), vb = el.getAttribute("viewBox");
        const inner = [...el.childNodes].map((c) => new XMLSerializer().serializeToString(c)).join("");
        out.push(`<svg x="${X(r.left)}" y="${Y(r.top)}" width="${num(r.width)}" height="${num(r.height)}"` +
          (vb ? ` viewBox="${esc(vb)}"` : "") + ` font-family="sans-serif">${inner}</svg>`);
        return;
      }
      rects(el, cs);
      el.childNodes.forEach((c) => {
        if (c.nodeType === Node.TEXT_NODE) texts(c, cs);
        else if (c.nodeType === Node.ELEMENT_NODE) walk(c);
      });
    }
    walk(box);
    const w = Math.ceil(o.width) + 2, h = Math.ceil(o.height) + 2;
    const svg = `<svg xmlns="${SVGNS}" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">` +
      `<rect x="0" y="0" width="${w}" height="${h}" fill="#ffffff"/>${out.join("")}</svg>`;
    return { svg, w, h };
  }
  // The current step as one native SVG: its header, caption and the views that have something to show,
  // laid out off screen with the step view's own CSS, then drawn as rect and text elements (nativeSVG).
  function stepSVG(root) {
    const css = (root.querySelector("style") || {}).textContent || "";
    const box = document.createElement("div");
    box.className = "ds-stepper ds-export";
    box.style.cssText = "background:#fff;padding:10px;width:max-content;max-width:1600px";
    const head = document.createElement("div");
    head.className = "ds-head";
    head.textContent = `${root.querySelector(".ds-head").textContent} · ${root.querySelector(".ds-label").textContent}`;
    box.appendChild(head);
    box.appendChild(root.querySelector(".ds-caption").cloneNode(true));
    const grid = document.createElement("div");
    grid.className = "ds-grid";
    root.querySelectorAll(".ds-grid > .ds-plot").forEach((p) => {
      const c = p.cloneNode(true);
      c.classList.remove("ds-overflows");
      c.style.flex = "0 0 auto";
      c.querySelectorAll(".ds-scroll").forEach((s) => { s.style.overflow = "visible"; });
      c.querySelectorAll("details").forEach((d) => d.remove());  // the pool browser is a list to open, not a picture
      grid.appendChild(c);
    });
    box.appendChild(grid);
    const probe = document.createElement("div");
    probe.className = "ds-stepper";
    probe.style.cssText = "position:absolute;left:-100000px;top:0";
    const style = document.createElement("style");
    style.textContent = css;
    probe.appendChild(style);
    probe.appendChild(box);
    document.body.appendChild(probe);
    try { return nativeSVG(box); } finally { probe.remove(); }
  }
  function save(name, blob) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  }
  // Trace values written into a file go through the step view's one escaper (views.js); file names keep
  // only plain characters.
  const esc = (v) => window.DecodeScopeViews.esc(v);
  const list = (v) => (Array.isArray(v) ? v : []);
  const plain = (v) => String(v).replace(/[^\w.-]+/g, "_").slice(0, 60);
  function fileName(root, ext) {
    const D = JSON.parse(root.querySelector(".ds-data").textContent);
    return `decodescope-${plain(D.method)}-step${plain(root.dataset.step || 0)}.${ext}`;
  }
  function saveSVG(root) {
    save(fileName(root, "svg"), new Blob([stepSVG(root).svg], { type: "image/svg+xml" }));
  }
  function savePNG(root, scale) {
    const { svg, w, h } = stepSVG(root), img = new Image(), k = scale || 2;
    img.onload = () => {
      const c = document.createElement("canvas");
      c.width = w * k; c.height = h * k;
      const g = c.getContext("2d");
      g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
      g.scale(k, k);
      g.drawImage(img, 0, 0);
      c.toBlob((b) => save(fileName(root, "png"), b), "image/png");
    };
    img.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(svg);
  }
  // The run as one self-contained HTML deck for a projector: one view per slide (the window, the pool, the
  // trajectory, the tree, the mask of a step each on its own slide), for the steps that teach (D.slides,
  // viz/exports/teach.py: no prefill, the steps where guesses were accepted, capped); the stepper walks those
  // steps, then goes back. Sizes are set for 1920x1080 (tokens 28 px, legends 20 px) and scale with the screen
  // (--u); the tree is redrawn in that type, the mask zoomed on the rows that matter (views.js maskSlide).
  // ← → Space Home End move, #5 opens slide 5.
  const SLIDE_TREE = { dx: 210, dy: 46, fs: 26, r: 14, label: 380, rows: 14 };
  function slideBody(root, D, s, v) {
    const V = window.DecodeScopeViews, plot = root.querySelector(`.ds-grid > .ds-plot[data-view="${v}"]`);
    if (!plot) return null;
    const legend = plot.querySelector(".ds-legend"), title = plot.querySelector(".ds-vt").textContent;
    const sized = (svg, w) => svg.replace("<svg ", `<svg style="width:calc(${w} * var(--u));height:auto" `);
    let note = "", body = "";
    if (v === "tree") {
      const [t, svg] = V.treeView(D, s, SLIDE_TREE);
      if (!svg) return null;
      const w = /width="(\d+(?:\.\d+)?)"/.exec(svg);
      return { title: t, note, body: sized(svg, w ? w[1] : 1800), legend };
    }
    if (v === "mask") {
      const [why, svg, w] = V.maskSlide(D, s);
      if (!svg) return null;
      return { title, note: why, body: sized(svg, w), legend };
    }
    const table = plot.querySelector(".ds-scroll > table.ds-tab");
    if (!table) return null;  // "no Jacobi window", a pool key with no candidates: nothing to show
    body = table.outerHTML;
    return { title, note, body, legend };
  }
  function slidesHTML(root, n, go, back) {
    const D = JSON.parse(root.querySelector(".ds-data").textContent), slides = [];
    const which = Array.isArray(D.slides) ? D.slides.filter((k) => Number.isInteger(k) && k >= 0 && k < n) : [];
    const head = root.querySelector(".ds-head").textContent;
    (which.length ? which : [...Array(n).keys()]).forEach((k) => {
      go(k);
      const s = D.steps[k], label = root.querySelector(".ds-label").textContent, cap = root.querySelector(".ds-caption").textContent;
      list(D.views).forEach((v) => {
        const b = slideBody(root, D, s, v);
        if (!b) return;
        slides.push(`<section class="slide" data-step="${esc(root.dataset.step)}" data-view="${esc(v)}">` +
          `<div class="sl-head">${esc(D.method)} · ${esc(label)}</div><h2 class="sl-title">${esc(b.title)}</h2>` +
          `<p class="sl-cap">${esc(cap)}</p>${b.note ? `<p class="sl-note">${esc(b.note)}</p>` : ""}` +
          `<div class="sl-view">${b.body}</div>${b.legend ? b.legend.outerHTML : ""}</section>`);
      });
    });
    go(back);
    const title = esc(`DecodeScope — ${D.method}: ${slides.length} slides, ${which.length || n} of ${n} steps (${head})`);
    const ok = esc(D.palette.state.matched), pc = D.palette.page;
    return `<!doctype html><html><head><meta charset="utf-8"><title>${title}</title><style>` +
      ":root{--u:min(calc(100vw / 1920),calc(100vh / 1080))}" +
      "body{margin:0;background:#333;font-family:system-ui,sans-serif;color:#222;overflow:hidden}" +
      ".slide{display:none;box-sizing:border-box;width:100vw;height:100vh;background:#fff;overflow:hidden;" +
      "padding:calc(26 * var(--u)) calc(44 * var(--u));flex-direction:column;gap:calc(12 * var(--u))}.slide.on{display:flex}" +
      ".slide *{box-sizing:border-box}.sl-head{font-size:calc(20 * var(--u));color:#555;flex:none}" +
      ".sl-title{font-size:calc(32 * var(--u));margin:0;font-weight:600;flex:none;line-height:1.2}" +
      `.sl-cap{font-size:calc(26 * var(--u));margin:0;background:${esc(pc.caption)};border-left:calc(6 * var(--u)) solid ${esc(pc.accent)};` +
      "padding:calc(8 * var(--u)) calc(14 * var(--u));line-height:1.3;flex:none}" +
      ".sl-note{font-size:calc(22 * var(--u));margin:0;color:#333;flex:none}" +
      ".sl-view{flex:1 1 auto;min-height:0;display:flex;align-items:center;justify-content:center}" +
      ".sl-view svg{max-width:100%;max-height:100%}" +
      "table.ds-tab{border-collapse:separate;border-spacing:calc(5 * var(--u));font-size:calc(28 * var(--u))}" +
      "table.ds-tab th{font-size:calc(24 * var(--u));color:#555;text-align:right;white-space:nowrap;font-weight:normal;" +
      "padding-right:calc(8 * var(--u))}" +
      "table.ds-tab td{min-width:calc(64 * var(--u));height:calc(66 * var(--u));text-align:center;white-space:pre;" +
      "border:calc(2 * var(--u)) solid #999;border-radius:calc(5 * var(--u));padding:calc(2 * var(--u)) calc(8 * var(--u));line-height:1.1}" +
      "table.ds-tab td small{display:block;font-size:calc(16 * var(--u));color:#555}" +
      `table.ds-tab td.ds-x0{border:calc(5 * var(--u)) solid ${esc(pc.x0)}}table.ds-tab td.ds-init{border-style:dashed}` +
      `table.ds-tab td.ds-hv{box-shadow:0 0 0 calc(4 * var(--u)) ${ok}}table.ds-tab td.ds-empty{border:none}` +
      "table.ds-tab tr.ds-chosen th{font-weight:700;color:#000}table.ds-tab tr.ds-chosen td{border:calc(3 * var(--u)) solid #222}" +
      ".ds-legend{font-size:calc(20 * var(--u));display:flex;flex-wrap:wrap;gap:calc(6 * var(--u)) calc(24 * var(--u));flex:none}" +
      ".ds-sw{white-space:nowrap}.ds-sw i{display:inline-block;width:calc(20 * var(--u));height:calc(20 * var(--u));" +
      "border:1px solid #999;border-radius:2px;margin-right:calc(6 * var(--u));vertical-align:-3px}" +
      "#count{position:fixed;right:12px;bottom:8px;color:#777;font-size:calc(16 * var(--u))}</style><body>" +
      slides.join("\n") + `<div id="count"></div><script>(function(){` +
      `var s=document.querySelectorAll(".slide"),c=0;function go(k){c=Math.max(0,Math.min(s.length-1,k));` +
      `s.forEach(function(e,j){e.classList.toggle("on",j===c)});document.getElementById("count").textContent=` +
      `"slide "+(c+1)+" / "+s.length+" (← →)";}document.addEventListener("keydown",function(e){` +
      `var k={ArrowRight:c+1," ":c+1,PageDown:c+1,ArrowLeft:c-1,PageUp:c-1,Home:0,End:s.length-1}[e.key];` +
      `if(k!==undefined){e.preventDefault();go(k);}});go(parseInt((location.hash||"#1").slice(1),10)-1||0);})();` +
      `</` + `script>`;  // no closing body/html tags: the host page keeps the only one
  }
  function saveSlides(root, n, go, back) {
    const D = JSON.parse(root.querySelector(".ds-data").textContent);
    save(`decodescope-${plain(D.method)}-slides.html`, new Blob([slidesHTML(root, n, go, back)], { type: "text/html" }));
  }
  // Presentation mode: full screen where the browser allows it, large type either way; Esc leaves.
  function present(root, on) {
    const want = on === undefined ? !root.classList.contains("ds-present") : on;
    root.classList.toggle("ds-present", want);
    if (want) {
      root.focus();
      if (root.requestFullscreen) root.requestFullscreen().catch(() => {});
      root.onfullscreenchange = () => { if (!document.fullscreenElement) root.classList.remove("ds-present"); };
    } else if (document.fullscreenElement === root && document.exitFullscreen) {
      document.exitFullscreen().catch(() => {});
    }
    return want;
  }
  return { stepSVG, saveSVG, savePNG, slidesHTML, saveSlides, present };
})();
