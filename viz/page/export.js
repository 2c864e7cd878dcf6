// DecodeScope pictures that leave the page: the current step's views as one SVG or PNG file, and a
// presentation mode (full screen, large type, keyboard only). No library: the step's caption and views are
// cloned into an SVG <foreignObject> with the step view's own CSS, so the file looks like the page; the PNG
// is that SVG drawn on a canvas (2x for projectors).
window.DecodeScopeExport = window.DecodeScopeExport || (function () {
  const XHTML = "http://www.w3.org/1999/xhtml";
  // slide: the presentation mode's large type, and only the panels that have something to show this step
  function stepSVG(root, slide) {
    const css = (root.querySelector("style") || {}).textContent || "";
    const box = document.createElement("div");
    box.className = "ds-stepper ds-export" + (slide ? " ds-present" : "");
    box.setAttribute("xmlns", XHTML);
    box.style.cssText = "background:#fff;padding:10px;width:max-content;max-width:" + (slide ? "1400px;max-height:none;overflow:visible" : "1600px");
    const head = document.createElement("div");
    head.className = "ds-head";
    head.textContent = `${root.querySelector(".ds-head").textContent} · ${root.querySelector(".ds-label").textContent}`;
    box.appendChild(head);
    box.appendChild(root.querySelector(".ds-caption").cloneNode(true));
    const grid = document.createElement("div");
    grid.className = "ds-grid";
    root.querySelectorAll(".ds-grid > .ds-plot").forEach((p) => {
      const body = p.querySelector(".ds-scroll");
      if (slide && body && !body.innerHTML.trim()) return;  // "no Jacobi window": an empty panel teaches nothing
      const c = p.cloneNode(true);
      c.classList.remove("ds-overflows");
      c.style.flex = "0 0 auto";
      c.querySelectorAll(".ds-scroll").forEach((s) => { s.style.overflow = "visible"; });
      grid.appendChild(c);
    });
    box.appendChild(grid);
    // measure the clone laid out off screen, then serialise it as XHTML inside the SVG
    const probe = document.createElement("div");
    probe.className = "ds-stepper";
    probe.style.cssText = "position:absolute;left:-100000px;top:0";
    const style = document.createElement("style");
    style.textContent = css;
    probe.appendChild(style);
    probe.appendChild(box);
    document.body.appendChild(probe);
    const w = Math.ceil(box.scrollWidth) + 2, h = Math.ceil(box.scrollHeight) + 2;
    const body = new XMLSerializer().serializeToString(box);
    probe.remove();
    const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">` +
      `<foreignObject x="0" y="0" width="${w}" height="${h}"><div xmlns="${XHTML}" class="ds-stepper">` +
      `<style>${css.replace(/</g, "&lt;")}</style>${body}</div></foreignObject></svg>`;
    return { svg, w, h };
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
