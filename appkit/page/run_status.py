"""The line beside the Run button: what a run waits for, its newest tokens, then where its results are; a value
out of range as the user types replaces the last run's "✓" there.

Why: a first run waits for the default model's fetch, its load, the thread timing and maybe the tuner, and
its results sit far below the button on a first visit; nothing near the button changed for a minute.
"""
from __future__ import annotations

# It reads the status line and the output box (far below on a first visit), so no handler sends anything twice.
# Two lines: #ds-run-status under Run, #ds-lesson-status under the lesson's buttons (at the top of the page, in view
# at 1280x720 while a stop's run starts). A click arms its line(s) and says "running…" at once, before any handler
# answers; the line keeps saying it until the status line changes from what it read at the click (the previous
# run's), then follows the new run: what it waits for, its newest tokens, then where its results are.
RUN_STATUS_HEAD = """<script>(() => {
  const BUSY = /loading model|waiting for|tuning|timing|running…/;
  const LESSON = "#ds-lesson-start,#ds-lesson-prev,#ds-lesson-next";
  const run = { sel: "#ds-run-status", armed: false }, les = { sel: "#ds-lesson-status", armed: false, lesson: true };
  document.addEventListener("click", (e) => {
    const t = e.target && e.target.closest ? e.target : null;
    const hit = t && (t.closest("#ds-run") ? "run" : t.closest(LESSON) ? "lesson" : "");
    if (!hit || t.closest("button[disabled]")) return;
    const from = [statsLine(), msgText()];
    for (const b of hit === "lesson" ? [run, les] : [run]) {
      b.armed = true; b.from = from;
      put(b, busy(hit === "lesson" ? "running… starting this stop's run (its step view opens when it is done)"
                                   : "running… starting the run", ""));
    }
    if (hit === "run" && les.armed) { les.armed = false; put(les, ""); }  // a plain Run: the lesson's line goes
  }, true);
  setInterval(() => { tick(run); tick(les); }, 250);
  function tick(b) {
    const box = document.querySelector(b.sel);
    if (!box) return;
    if (!b.lesson) {
      const check = document.querySelector("#ds-budget"), bad = check ? check.innerText.trim() : "";
      if (bad.startsWith("⚠")) {  // a value out of range as typed: said here, the last run's ✓ cleared
        put(b, "<span class='ds-rs-busy'>" + esc(bad) + " (fix it before Run)</span>");
        box.dataset.check = "1"; b.armed = false;
        return;
      }
      if (box.dataset.check && !b.armed) { put(b, ""); delete box.dataset.check; }
      delete box.dataset.check;
    }
    if (!b.armed) return;
    const s = statsLine(), m = msgText();
    if (b.from) {  // nothing from the new run yet: the status line still reads the previous run's
      if (s === b.from[0] && !(m && m !== b.from[1])) return;
      b.from = null;
    }
    const out = document.querySelector("#ds-output textarea"), text = out ? out.value : "";
    if (BUSY.test(s)) {
      put(b, busy(s, text));
    } else if (/ done|Stopped|Not run/.test(s)) {
      const parts = s.split(" · "), short = parts.slice(0, 2).concat(parts.filter((x) => /greedy's speed|not measured|copied from/.test(x)));
      const where = b.lesson ? ["#ds-stepview", " — the step view is below ↓"] : ["#ds-stats", " — the results are below ↓"];
      put(b, "<a href='" + where[0] + "' class='ds-rs-done'>" + (/Not run/.test(s) ? "⚠ " : "✓ ") + esc(short.join(" · ")) +
        where[1] + "</a>");
    } else if (m && m.includes("⚠")) {
      put(b, "<span class='ds-rs-busy'>⚠ not run: the message below the settings says why</span>");
    }
  }
  function busy(s, text) {
    const tail = text ? "<div class='ds-rs-tail'>…" + esc(text.slice(-160)) + "</div>" : "";
    return "<span class='ds-rs-busy'><i class='ds-rs-spin'></i>" + esc(s) + "</span>" + tail;
  }
  function put(b, html) {
    const box = document.querySelector(b.sel);
    if (box && box.dataset.last !== html) { box.innerHTML = html; box.dataset.last = html; }
  }
  function statsLine() { const st = document.querySelector("#ds-stats"); return st ? st.innerText.trim().split("\\n")[0] : ""; }
  function msgText() { const el = document.querySelector("#ds-msg"); return el ? el.innerText.trim() : ""; }
  function esc(t) { return t.replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";"); }
})();</script>"""
RUN_STATUS_CSS = """
#ds-run-status,#ds-lesson-status{font-size:13px;min-height:1.2em;margin:2px 0 6px;overflow-wrap:anywhere}
#ds-lesson-status{font-size:15px;padding:0 8px}#ds-lesson-status:empty{display:none}
:is(#ds-run-status,#ds-lesson-status) .ds-rs-busy{color:#7a5a00}
:is(#ds-run-status,#ds-lesson-status) .ds-rs-spin{display:inline-block;width:.8em;height:.8em;margin-right:6px;vertical-align:-1px;
  border:2px solid #e6a700;border-top-color:transparent;border-radius:50%;animation:ds-rs-turn 1s linear infinite}
@keyframes ds-rs-turn{to{transform:rotate(360deg)}}
:is(#ds-run-status,#ds-lesson-status) .ds-rs-tail{font-family:ui-monospace,monospace;font-size:12px;color:#333;white-space:pre-wrap;
  max-height:4.5em;overflow:hidden;background:#f7f7f7;border-radius:3px;padding:2px 6px;margin-top:2px}
"""
