"""The step view's CSS. Why its own file: the responsive rules (stacking at narrow widths, each wide
picture scrolling in its own box) are the part a 400 px phone depends on."""

from ..palette import CURRENT_COLOR, SELECT_COLOR, STATE_COLORS

_CSS = """
.ds-stepper{font-family:system-ui,sans-serif;font-size:14px;color:#222;outline:none;max-width:100%;
  overflow-wrap:anywhere;box-sizing:border-box}
.ds-stepper *{box-sizing:border-box}
.ds-head{font-size:13px;color:#333;margin:2px 0 4px}
.ds-controls{display:flex;gap:6px;align-items:center;flex-wrap:wrap;margin:4px 0;position:sticky;top:0;z-index:5;
  background:#fff;padding:3px 0;box-shadow:0 2px 3px -2px rgba(0,0,0,.25)}
.ds-plot.ds-overflows>.ds-vt::after{content:"  · scroll →";color:#a50f15;font-weight:normal;white-space:nowrap}
.ds-controls button{padding:3px 9px;border:1px solid #bbb;border-radius:4px;background:#f7f7f7;cursor:pointer}
.ds-slider{flex:1 1 140px;min-width:100px}
.ds-label{font-variant-numeric:tabular-nums;min-width:90px}
.ds-caption{background:#f3f7fb;border-left:4px solid #3182bd;padding:6px 10px;margin:6px 0;min-height:1.4em}
.ds-text{line-height:1.9;white-space:pre-wrap;border:1px solid #ddd;padding:8px;border-radius:4px;max-height:220px;
  overflow:auto}
.ds-tok{padding:1px 0;border-radius:3px;cursor:pointer;border-bottom:3px solid transparent}
.ds-tok.ds-future{opacity:.18}
.ds-tok.ds-cur{border-bottom-color:CURRENT;box-shadow:0 0 0 1px CURRENT}
.ds-tok.ds-sel{outline:2px solid #000}
.ds-legend{margin:4px 0;font-size:12px;display:flex;flex-wrap:wrap;gap:2px 10px;align-items:center}
.ds-sw{white-space:nowrap}.ds-sw i{display:inline-block;width:12px;height:12px;border:1px solid #999;
  border-radius:2px;margin-right:4px;vertical-align:-2px}
.ds-selinfo{font-size:12px;color:#a50f15;min-height:1em}
.ds-mode.ds-on{background:#dbe9f6;font-weight:600}
.ds-grid,.ds-run{display:flex;flex-wrap:wrap;gap:8px;margin-top:8px}
.ds-plot,.ds-run-plot{flex:1 1 440px;min-width:0;max-width:100%}
.ds-plot{border:1px solid #eee;border-radius:4px;padding:4px}
.ds-vt{font-weight:600;font-size:13px;margin:2px 0 4px}
.ds-scroll{overflow-x:auto;max-width:100%}
.ds-prof{margin-top:8px;border:1px solid #eee;border-radius:4px;padding:4px}
.ds-prof-num{font-size:13px;font-variant-numeric:tabular-nums}
table.ds-tab{border-collapse:separate;border-spacing:3px;font-size:12px;width:auto;margin:0}
table.ds-tab tr,table.ds-tab th{border:none !important;background:none !important}
table.ds-tab th{font-weight:normal;color:#555;text-align:right;white-space:nowrap;padding-right:4px}
table.ds-tab td{min-width:34px;height:34px;text-align:center;border:1px solid #999;border-radius:3px;padding:1px 3px;
  white-space:pre;cursor:default}
table.ds-tab td small{display:block;font-size:9px;color:#555}
table.ds-tab td.ds-x0{border:3px solid #1f4e79}
table.ds-tab td.ds-init{border:1px dashed #888}
table.ds-tab td.ds-hv{box-shadow:0 0 0 2px MATCHED}
table.ds-tab td.ds-empty{border:none}
table.ds-tab tr.ds-chosen th{font-weight:700;color:#000}
table.ds-tab tr.ds-chosen td{border:2px solid #222}
.ds-selcell{outline:3px solid SELECT !important;outline-offset:1px}
svg .ds-selcell{outline:none;stroke:SELECT !important;stroke-width:4px !important}
.ds-stepper.ds-present{font-size:22px;background:#fff;padding:0 28px 18px;overflow:auto;max-height:100vh}
/* presentation type: no text under 20 px on a 1920 px screen (16 px at 1280, below): the floor for every element
   (the legends, the header, the notes, the narration, the @positions); the rules after it raise some further */
.ds-stepper.ds-present *:where(:not(svg, svg *)){font-size:max(1em, 20px)}
.ds-present .ds-side :is(h1,h2,h3){font-size:1.2em}
@media (max-width:1600px){.ds-stepper.ds-present *:where(:not(svg, svg *)){font-size:max(1em, 16px)}}
.ds-present .ds-controls button{font-size:20px;padding:6px 14px}.ds-present .ds-caption{font-size:26px;line-height:1.35}
.ds-present .ds-text{font-size:22px;max-height:28vh}.ds-present table.ds-tab{font-size:20px}
.ds-present table.ds-tab td{min-width:54px;height:54px}.ds-present table.ds-tab td small{font-size:20px}
.ds-present .ds-plot svg{max-width:100%;height:auto}  /* the tree and the mask are drawn in projector type for their
   box (views.js presentView), cut to fit; the viewBox keeps a picture that still overflows whole: nothing scrolls sideways */
.ds-stepper.ds-present .ds-side,.ds-present .ds-head,.ds-present .ds-legend,.ds-present .ds-pick{font-size:20px}
/* full screen gives the grid a definite height: its rows would shrink to fit it and the token strip, caption and
   headings would be drawn over each other; rows as tall as their content, the page scrolls down instead */
.ds-stepper.ds-present{grid-auto-rows:max-content;align-content:start}
.ds-stepper.ds-present.ds-sided{grid-template-columns:minmax(220px,20%) minmax(0,1fr)}
.ds-present .ds-plot{flex:1 1 100%}  /* one picture per row: every column of a window or a pool at projector size */
.ds-present .ds-vt{font-size:22px}
@media (max-width:1600px){.ds-present table.ds-tab{font-size:17px;border-spacing:2px}
  .ds-present table.ds-tab td{min-width:34px;height:46px;padding:1px 2px}
  .ds-present table.ds-tab td small{font-size:16px}  /* 1280x720: a 12-position trajectory fits the width */
  .ds-present .ds-caption{font-size:20px}.ds-present .ds-text{font-size:18px;max-height:22vh}.ds-present .ds-vt{font-size:18px}
  .ds-present .ds-controls button{font-size:17px;padding:3px 10px}
  .ds-stepper.ds-present .ds-side,.ds-present .ds-head,.ds-present .ds-legend,.ds-present .ds-pick{font-size:16px}}
.ds-present .ds-prof,.ds-present .ds-run{display:none}
.ds-present .ds-svg,.ds-present .ds-png,.ds-present .ds-slides{display:none}
details.ds-poolbrowse{margin-top:6px;font-size:12px}details.ds-poolbrowse summary{cursor:pointer;color:#333}
table.ds-pooltab th{text-align:left}table.ds-pooltab tr.ds-poolkey th{font-weight:bold;color:#000;background:#fff3b0 !important}
table.ds-pooltab td.ds-gram{min-width:0;height:auto;border:1px solid #ccc;white-space:pre;padding:1px 4px}
table.ds-pooltab td.ds-gram.ds-w{border-style:dashed}
.ds-stepper.ds-sided{display:grid;grid-template-columns:minmax(240px,27%) minmax(0,1fr);column-gap:16px;align-items:start}
.ds-sided>*{grid-column:2;min-width:0}
.ds-sided>.ds-side{grid-column:1;grid-row:1 / span 40;position:sticky;top:0;max-height:100vh;overflow:auto;
  border-right:3px solid #3182bd;padding-right:12px;font-size:15px;line-height:1.45}
.ds-pick{background:#eaf5ea;border-left:4px solid #2ca25f;padding:4px 10px;margin:4px 0;font-size:13px}
.ds-pick.ds-missing{background:#fff4d6;border-left-color:#e6a700}
@media (max-width:700px){.ds-stepper.ds-sided{display:block}.ds-sided>.ds-side{position:static;max-height:none;
  border-right:none;border-bottom:3px solid #3182bd;margin-bottom:6px}}
@media (max-width:700px){.ds-plot,.ds-run-plot{flex-basis:100%}.ds-label{min-width:0}
  .ds-controls{flex-wrap:wrap;gap:3px 4px;padding:2px 0}
  .ds-controls>*{flex:0 0 auto}
  .ds-stepper:not(.ds-present) .ds-controls button{padding:2px 6px !important;font-size:12px !important;font-weight:normal !important;
    min-width:0 !important;line-height:1.5 !important}
  .ds-controls .ds-slider{flex:1 1 80px;min-width:80px}.ds-controls .ds-label{font-size:12px}
  .ds-controls>span:not(.ds-label){display:none}}
"""
# the outline colours are the palette's (one meaning, one colour in Python figures, script and CSS)
CSS = _CSS.replace("MATCHED", STATE_COLORS["matched"]).replace("SELECT", SELECT_COLOR).replace("CURRENT", CURRENT_COLOR)
