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
  // The run as one self-contained HTML deck: one slide per step that teaches (D.slides, viz/exports/teach.py: no
  // prefill, the steps where guesses were accepted, capped), each the step's SVG in large type, scaled to
  // fill the screen (the stepper walks those steps, then goes back); ← → Space Home End move, #5 opens slide 5.
  function slidesHTML(root, n, go, back) {
    const D = JSON.parse(root.querySelector(".ds-data").textContent), slides = [];
    const which = Array.isArray(D.slides) ? D.slides.filter((k) => Number.isInteger(k) && k >= 0 && k < n) : [];
    (which.length ? which : [...Array(n).keys()]).forEach((k) => {
      go(k);
      slides.push(`<section class="slide" data-step="${esc(root.dataset.step)}">${stepSVG(root, true).svg}</section>`);
    });
    go(back);
    const title = esc(`DecodeScope — ${D.method}, ${slides.length} of ${n} steps`);
    return `<!doctype html><html><head><meta charset="utf-8"><title>${title}</title><style>` +
      "body{margin:0;background:#333;font-family:sans-serif}.slide{display:none}" +
      ".slide.on{display:flex;justify-content:center;align-items:center;min-height:100vh}" +
      ".slide>svg{width:100vw;height:100vh;background:#fff}" +
      "#count{position:fixed;right:12px;bottom:8px;color:#ddd;font-size:14px}</style><body>" +
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
