"""The line beside the Run button: what a run waits for, its newest tokens, then where its results are; a value
out of range as the user types replaces the last run's "✓" there.

Why: a first run waits for the default model's fetch, its load, the thread timing and maybe the tuner, and
its results sit far below the button on a first visit; nothing near the button changed for a minute.
"""
from __future__ import annotations

# It reads the status line and the output box (far below on a first visit), so no handler sends anything twice.
RUN_STATUS_HEAD = """<script>(() => {
  const BUSY = /loading model|waiting for|tuning|timing|running…/;
  let armed = false;
  document.addEventListener("click", (e) => { if (e.target.closest && e.target.closest("#ds-run")) armed = true; }, true);
  setInterval(() => {
    const box = document.querySelector("#ds-run-status"), check = document.querySelector("#ds-budget");
    const bad = check ? check.innerText.trim() : "";
    if (box && bad.startsWith("⚠")) {  // a value out of range as typed: said here, the last run's ✓ cleared
      const html = "<span class='ds-rs-busy'>" + esc(bad) + " (fix it before Run)</span>";
      if (box.dataset.last !== html) { box.innerHTML = html; box.dataset.last = html; box.dataset.check = "1"; }
      armed = false;
      return;
    }
    if (box && box.dataset.check && !armed) { box.innerHTML = ""; box.dataset.last = ""; delete box.dataset.check; }
    if (!box || !armed) return;
    delete box.dataset.check;
    const st = document.querySelector("#ds-stats"), out = document.querySelector("#ds-output textarea");
    const s = st ? st.innerText.trim().split("\\n")[0] : "", text = out ? out.value : "";
    let html;
    if (BUSY.test(s)) {
      const tail = text ? "<div class='ds-rs-tail'>…" + esc(text.slice(-160)) + "</div>" : "";
      html = "<span class='ds-rs-busy'><i class='ds-rs-spin'></i>" + esc(s) + "</span>" + tail;
    } else if (/ done|Stopped|Not run/.test(s)) {
      const parts = s.split(" · "), short = parts.slice(0, 2).concat(parts.filter((x) => /greedy's speed|not measured|copied from/.test(x)));
      html = "<a href='#ds-stats' class='ds-rs-done'>" + (/Not run/.test(s) ? "⚠ " : "✓ ") + esc(short.join(" · ")) +
        " — the results are below ↓</a>";
    } else return;
    if (box.dataset.last !== html) { box.innerHTML = html; box.dataset.last = html; }
  }, 250);
  function esc(t) { return t.replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";"); }
})();</script>"""
RUN_STATUS_CSS = """
#ds-run-status{font-size:13px;min-height:1.2em;margin:2px 0 6px;overflow-wrap:anywhere}
#ds-run-status .ds-rs-busy{color:#7a5a00}
#ds-run-status .ds-rs-spin{display:inline-block;width:.8em;height:.8em;margin-right:6px;vertical-align:-1px;
  border:2px solid #e6a700;border-top-color:transparent;border-radius:50%;animation:ds-rs-turn 1s linear infinite}
@keyframes ds-rs-turn{to{transform:rotate(360deg)}}
#ds-run-status .ds-rs-tail{font-family:ui-monospace,monospace;font-size:12px;color:#333;white-space:pre-wrap;
  max-height:4.5em;overflow:hidden;background:#f7f7f7;border-radius:3px;padding:2px 6px;margin-top:2px}
"""
