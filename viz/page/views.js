// DecodeScope per-step pictures, drawn in the browser from the compact step data (see stepper.py): the
// Jacobi window and the pool as HTML tables, the token tree and the attention mask as SVG, the cost panel
// with plotly. Colours come only from D.palette (viz/palette.py). stepper.js calls these on every step change.
window.DecodeScopeViews = window.DecodeScopeViews || (function () {
  const CONFIG = { displaylogo: false, responsive: true };
  const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;" };  // numeric: plotly decodes these too
  // Every value from the trace goes through esc where it is written into HTML or SVG, numbers included:
  // a crafted trace puts markup where a position belongs (viz/escape.py is the Python side of this rule).
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);
  const own = (map, key) => map !== null && typeof map === "object" && Object.prototype.hasOwnProperty.call(map, key);
  // A palette colour looked up by a key from the trace: own keys only ("__proto__" is no colour).
  const pick = (map, key, dflt) => (own(map, key) ? map[key] : dflt);
  const isNum = (v) => typeof v === "number" && isFinite(v);
  const fixed = (v, d) => (isNum(v) ? v.toFixed(d) : String(v));  // a crafted "number" stays text (escaped when written)
  const list = (v) => (Array.isArray(v) ? v : []);
  // SI prefixes ("2.1G"), the one unit convention of every axis (viz/palette.py si) and this cost panel
  const SI = { "-12": "p", "-9": "n", "-6": "µ", "-3": "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E" };
  const fmt = (v) => {
    if (v === null || v === undefined) return "–";
    if (!isNum(v)) return String(v);
    if (v === 0 || (Math.abs(v) >= 1e-2 && Math.abs(v) < 1e3)) return (+v).toFixed(2).replace(/\.?0+$/, "");
    const e = Math.max(-12, Math.min(18, 3 * Math.floor(Math.log10(Math.abs(v)) / 3)));
    return `${+(v / 10 ** e).toPrecision(3)}${SI[e]}`;
  };
  // A step's counts as the caption says them (viz/counts.py StepCounts.words): guessed + the model's own.
  const counted = (s) => isNum(s.g) ? `${s.g} guessed token${s.g === 1 ? "" : "s"} + ${esc(s.own)} of the model's own` : `${list(s.a).length} token(s)`;
  const quote = (D, toks) => JSON.stringify(list(toks).map((t) => tok(D, t)).join(""));
  function tok(D, t) { return own(D.vocab, String(t)) ? String(D.vocab[String(t)]) : `<${t}>`; }
  const MAX_COLS = 256;  // wider than any real window or block (64): a crafted slot cannot make a huge loop
  function cell(D, t, pos, bg, cls, title) {
    const p = pos === null || pos === undefined ? "" : ` data-pos="${esc(pos)}"`;
    return `<td class="${esc(cls || "")}"${p} style="background:${esc(bg)}" title="${esc(title || "")}">${esc(tok(D, t))}` +
      `${pos === null || pos === undefined ? "" : `<small>@${esc(pos)}</small>`}</td>`;
  }

  // ---- Jacobi window: rows new guesses (top) .. x0·L0 (bottom); colour = age (gold scale), never an origin.
  function windowView(D, s) {
    const info = s.info || {}, P = D.palette;
    if (!Array.isArray(info.window) || s.r.indexOf("w") < 0) return [`Step ${s.i}: no Jacobi window (${D.method})`, ""];
    const L = info.window.length, grid = {};
    let width = 0;
    for (let k = 0; k < s.r.length; k++) {
      const r = s.r[k];
      if (r !== "x" && r !== "w") continue;
      const lc = r === "x" ? [0, 0] : list(s.sl[k]), produced = r === "x" ? s.i - 1 : s.i - (L - lc[0]);
      grid[lc[0] + "," + lc[1]] = { t: s.t[k], pos: s.p[k], x0: r === "x", age: produced >= 1 ? s.i - produced : null };
      if (Number.isInteger(lc[1])) width = Math.min(Math.max(width, lc[1] + 1), MAX_COLS);
    }
    const hv = info.harvested || 0, rows = [];
    const nxt = list(info.window_next);
    if (nxt.length) {
      const shift = width - nxt.length, cells = [];
      for (let c = 0; c < width; c++) {
        const j = c - shift, below = grid[(L - 1) + "," + c];
        cells.push(j >= 0 && j < nxt.length ? cell(D, nxt[j], below ? below.pos + 1 : null, P.age[0],
          c < hv ? "ds-hv" : "", "new guess: produced by this step") : "<td class='ds-empty'></td>");
      }
      rows.push(`<tr><th>new guesses</th>${cells.join("")}</tr>`);
    }
    for (let lv = L - 1; lv >= 0; lv--) {
      const cells = [];
      for (let c = 0; c < width; c++) {
        const g = grid[lv + "," + c];
        if (!g) { cells.push("<td class='ds-empty'></td>"); continue; }
        const bg = g.x0 ? P.role.x0 : g.age === null ? P.init : pick(P.age, Math.min(g.age, P.age.length - 1), P.init);
        const why = g.x0 ? "x0: last accepted token" : g.age === null ? "initial random guess" : `from step ${s.i - g.age} (t-${g.age})`;
        const cls = (g.x0 ? "ds-x0 " : g.age === null ? "ds-init " : "") + (c < hv ? "ds-hv" : "");
        cells.push(cell(D, g.t, g.pos, bg, cls, why));
      }
      rows.push(`<tr><th>${lv ? "L" + lv : "x0 · L0"}</th>${cells.join("")}</tr>`);
    }
    const title = `Jacobi window at step ${s.i} — ` + (hv ? `${hv} column n-gram(s) harvested into the pool (outlined)`
      : "warm-up: nothing harvested yet");
    return [title, `<table class="ds-tab">${rows.join("")}</table>`];
  }

  // ---- Pool lookup: one row per candidate; matched tokens in their origin colour, first mismatch red.
  function poolView(D, s) {
    const info = s.info || {}, P = D.palette;
    if (!("candidates" in info)) return [`Step ${s.i}: no pool lookup (${D.method})`, ""];
    const keyRaw = info.pool_key !== undefined ? info.pool_key : info.key;
    const key = Array.isArray(keyRaw) ? keyRaw : keyRaw === null || keyRaw === undefined ? [] : [keyRaw];
    const cands = list(info.candidates), matched = list(info.matched), src = list(info.candidate_sources);
    if (!cands.length) return [`Step ${s.i}: key ${quote(D, key)} found no candidates — the model's own token was kept`, poolBrowser(D, s, key)];
    const pos = {};
    for (let k = 0; k < s.r.length; k++) if (s.r[k] === "c") pos[list(s.sl[k])[0] + "," + list(s.sl[k])[1]] = s.p[k];
    const rows = cands.map((c, g) => {
      const m = matched[g] || 0, chosen = g === info.chosen;
      const source = src[g] || D.pool_source;  // older traces name no source: the method's (viz/steps/pool.py)
      const ok = P.origin[source === "reference" ? "reference" : source && source !== "window" ? "text_ngram" : "candidate"];
      const cells = list(c).map((t, i) => cell(D, t, pos[g + "," + i], i < m ? ok : i === m ? P.state.rejected : P.state.unchecked,
        "", i < m ? "matches the model" : i === m ? "first mismatch" : "not checked")).join("");
      return `<tr class="${chosen ? "ds-chosen" : ""}"><th>${chosen ? "▶ " : ""}cand ${g}${source ? ` (${esc(source)})` : ""}</th>${cells}</tr>`;
    });
    return [`Step ${s.i}: key ${quote(D, key)} → ${cands.length} candidate(s); accepted ${counted(s)}: ${quote(D, s.a)}`,
      `<table class="ds-tab">${rows.join("")}</table>` + poolBrowser(D, s, key)];
  }

  // ---- Pool browser: every n-gram in the pool after this step, by key, rebuilt by replaying the trace's
  // per-step deltas (info.pool_delta: ["t"|"w"|"x", key, ...n-gram], as viz/steps/pool.py contents() does).
  let poolOpen = false;  // the list stays open across step changes once opened
  document.addEventListener("toggle", (e) => {
    const d = e.composedPath ? e.composedPath()[0] : e.target;
    if (d && d.classList && d.classList.contains("ds-poolbrowse")) poolOpen = d.open;
  }, true);
  function poolAt(D, s) {
    const pool = new Map();
    for (const st of D.steps) {
      if (st.i > s.i) break;
      for (const d of list((st.info || {}).pool_delta)) {
        if (!Array.isArray(d)) continue;
        const [op, k, ...g] = d;
        if (!pool.has(k)) pool.set(k, { t: new Map(), w: new Map() });
        const shelf = pool.get(k)[op === "t" ? "t" : "w"], id = g.join(",");
        if (op === "x") shelf.delete(id); else shelf.set(id, g);
      }
    }
    return pool;
  }
  function poolBrowser(D, s, key, limit = 400) {
    if (!D.steps.some((st) => (st.info || {}).pool_delta)) return "";
    const pool = poolAt(D, s), look = key.length ? key[key.length - 1] : null;
    const keys = [...pool.keys()].filter((k) => pool.get(k).t.size + pool.get(k).w.size)
      .sort((a, b) => (b === look) - (a === look) || a - b);
    let grams = 0;
    const rows = keys.map((k) => {
      const e = pool.get(k), cells = [...[...e.t.values()].map((g) => [g, ""]), ...[...e.w.values()].map((g) => [g, " ds-w"])];
      grams += cells.length;
      return `<tr class="${k === look ? "ds-poolkey" : ""}" data-key="${esc(k)}"><th>${k === look ? "▶ " : ""}${esc(quote(D, [k]))}</th>` +
        cells.map(([g, w]) => `<td class="ds-gram${w}" data-g="${esc(g.join(","))}" title="${w ? "window guess" : "seen in the text"}">${esc(quote(D, g))}</td>`).join("") + "</tr>";
    });
    const more = rows.length > limit ? `<p>… ${rows.length - limit} more key(s)</p>` : "";
    return `<details class="ds-poolbrowse"${poolOpen ? " open" : ""}><summary>pool after step ${esc(s.i)}: ${keys.length} key(s), ` +
      `${grams} n-gram(s) (solid: seen in the text, dashed: window guesses; ▶ the key looked up)</summary>` +
      `<table class="ds-tab ds-pooltab">${rows.slice(0, limit).join("")}</table>${more}</details>`;
  }

  // ---- Token tree (SVG): placed from the step's view-model s.tv (viz/steps/tree.py view: positions, fills,
  // outlines, labels, tips and the title are decided there, once, for this page and the plotly figure alike;
  // stepper.py _tree_page packs it: node rows [x, y, style, parent, edge style], a node style [position,
  // label, fill, stroke, width, flags, name, tip], an edge style [colour, width, dashed]; texts index D.strs).
  const str = (D, k) => (Number.isInteger(k) && k >= 0 && k < list(D.strs).length ? String(D.strs[k]) : "");
  const style = (D, k) => (Number.isInteger(k) && k >= 0 && k < list(D.styles).length ? list(D.styles[k]) : []);
  // o: the sizes (the slide deck draws the same tree in projector type); o.rows: at most this many rows, the
  // title says how many are left out.
  const PAGE_TREE = { dx: 120, dy: 30, fs: 12, r: 9, label: 200, rows: Infinity };
  function treeView(D, s, o) {
    const v = s.tv || {}, z = Object.assign({}, PAGE_TREE, o || {});
    const all = list(v.n), rows = Math.max(isNum(v.r) ? v.r : 1, 1), keep = Math.min(rows, z.rows);
    const levels = Math.min(isNum(v.d) ? v.d : 0, MAX_COLS) + 1, deep = Math.max(Math.min(levels, isNum(z.depth) ? z.depth : levels), 1);
    const nodes = all.map((row) => ((isNum(list(row)[1]) && list(row)[1] >= keep) || (isNum(list(row)[0]) && list(row)[0] >= deep) ? null : row));
    if (!all.length) return [v.t ? String(v.t) : `Step ${s.i}: no tree recorded`, ""];
    const { dx, dy } = z, X = (x) => 16 + (isNum(x) ? x : 0) * dx, Y = (y) => 18 + (isNum(y) ? y : 0) * dy;
    const maxD = deep - 1;
    const w = 16 + maxD * dx + z.label, h = 18 + keep * dy;
    const out = [];
    nodes.forEach((row) => {
      if (!row) return;
      const [x, y, , a, es] = list(row), p = list(nodes[a]), [colour, width, dashed] = style(D, es);
      if (!Number.isInteger(a) || a < 0 || !p.length) return;  // a root (or a crafted index): no edge
      out.push(`<line x1="${esc(X(p[0]))}" y1="${esc(Y(p[1]))}" x2="${esc(X(x))}" y2="${esc(Y(y))}"` +
        ` stroke="${esc(str(D, colour))}" stroke-width="${esc(width)}"${dashed ? ' stroke-dasharray="3 3"' : ""}/>`);
    });
    nodes.forEach((row, k) => {
      if (!row) return;
      const [x, y, st] = list(row), [p, label, fill, stroke, sw, flags, name, tip] = style(D, st);
      const pruned = flags & 2, bad = flags & 1, pos = p === null || p === undefined ? "" : esc(p);
      const nm = name === -1 ? `node ${k}` : str(D, name);
      out.push(`<g${pruned ? ' opacity="0.6"' : ""}><title>${esc(nm + ": " + str(D, tip))}</title><circle data-pos="${pos}" cx="${esc(X(x))}" cy="${esc(Y(y))}" r="${z.r}"` +
        ` fill="${esc(str(D, fill))}" stroke="${esc(str(D, stroke))}" stroke-width="${esc(sw)}"/>` +
        (bad ? `<text x="${esc(X(x))}" y="${esc(Y(y) + z.fs / 3)}" text-anchor="middle" font-size="${z.fs}" fill="${esc(str(D, stroke))}">✕</text>` : "") +
        `<text x="${esc(X(x) + z.r + 4)}" y="${esc(Y(y) + z.fs / 3)}" font-size="${z.fs}" fill="${pruned ? "#777" : "#222"}" style="white-space:pre">${esc(str(D, label))}</text></g>`);
    });
    const cut = keep < rows || deep < levels ? ` (cut to fit: first ${keep} of ${rows} rows, ${deep} of ${levels} levels shown)` : "";
    return [String(v.t) + cut, `<svg width="${esc(w)}" height="${esc(h)}" viewBox="0 0 ${esc(w)} ${esc(h)}">${out.join("")}</svg>`];
  }

  // ---- Attention mask (SVG, one path for every visible cell): placed from the step's view-model s.mv
  // (viz/steps/mask.py view: each row's visible columns from the engine's tree_visibility, the role·position
  // labels, the role colours, the title), as the plotly figure places it.
  function maskView(D, s) {
    const v = s.mv || {}, P = D.palette, n = Math.min(isNum(v.n) ? v.n : 0, 400);
    if (!n) return [v.t ? String(v.t) : `Step ${s.i}: no query recorded`, ""];
    // labels readable at arm's length: 12-13 px type, cells as tall as the type
    const c = n <= 30 ? 18 : n <= 60 ? 13 : 5, lab = n <= 60, fs = c >= 18 ? 13 : 12, m = lab ? 86 : 10, cache = v.kv ? 2 * c : 0;
    const w = m + cache + n * c + 4, h = m + n * c + 4, labels = list(v.l), colours = list(v.c), pos = list(v.p);
    let d = "";
    list(v.r).slice(0, n).forEach((ref, i) => {
      const r = style(D, ref);  // this row's visible runs [a0, b0, a1, b1, ...]
      for (let k = 0; k + 1 < r.length; k += 2) {
        if (!isNum(r[k]) || !isNum(r[k + 1]) || r[k] < 0 || r[k + 1] >= n || r[k + 1] < r[k]) continue;  // a crafted run
        for (let j = r[k]; j <= r[k + 1]; j++) d += `M${m + cache + j * c} ${m + i * c}h${c - 1}v${c - 1}h${1 - c}z`;
      }
    });
    const out = [`<rect x="${m + cache}" y="${m}" width="${n * c}" height="${n * c}" fill="${esc(P.mask[0])}"/>`,
      cache ? `<rect x="${m}" y="${m}" width="${cache - 1}" height="${n * c}" fill="${esc(P.mask[2])}"><title>KV cache: ${esc(v.kv)} tokens, seen by every query</title></rect>` : "",
      `<path d="${d}" fill="${esc(P.mask[1])}"/>`];
    for (let k = 0; k < n; k++) {
      const at = pos[k] === null || pos[k] === undefined ? "" : esc(pos[k]), rc = esc(str(D, colours[k]) || "#ccc");
      out.push(`<rect class="ds-mrow" data-pos="${at}" x="${m}" y="${m + k * c}" width="${cache + n * c}" height="${c}" fill="none" stroke="none"/>`);
      out.push(`<rect class="ds-mcol" data-pos="${at}" x="${m + cache + k * c}" y="${m}" width="${c}" height="${n * c}" fill="none" stroke="none"/>`);
      out.push(`<rect x="${m - 7}" y="${m + k * c}" width="5" height="${c - 1}" fill="${rc}"/>`);
      out.push(`<rect x="${m + cache + k * c}" y="${m - 7}" width="${c - 1}" height="5" fill="${rc}"/>`);
      if (lab) {
        const L = esc(str(D, labels[k]));
        out.push(`<text x="${m - 9}" y="${m + k * c + c - 3}" font-size="${fs}" text-anchor="end">${L}</text>`);
        out.push(`<text transform="translate(${m + cache + k * c + c - 3},${m - 9}) rotate(-90)" font-size="${fs}">${L}</text>`);
      }
    }
    return [String(v.t), `<svg width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">${out.join("")}</svg>`];
  }

  // ---- The mask on a slide: the rows that matter, large. x0 and the chosen candidate's rows (lookahead, prompt
  // lookup) or the accepted path's rows (a tree), else the last rows; every column while they fit at
  // projector size, else the columns those rows may attend to. Returns [which rows and columns, svg, w, h].
  const SLIDE_MASK = { width: 1800, height: 640, fs: 24, rows: 14, cols: 48 };
  function maskRows(D, s, R = SLIDE_MASK.rows) {
    const v = s.mv || {}, n = Math.min(isNum(v.n) ? v.n : 0, 400), info = s.info || {};
    if (n <= R) return [[...Array(n).keys()], `all ${n} rows`];
    const sl = list(s.sl), r = String(s.r || ""), path = list(info.accepted_path).filter((k) => Number.isInteger(k) && k >= 0 && k < n);
    let rows = [], why = "";
    if (Number.isInteger(info.chosen) && r.indexOf("c") >= 0) {
      for (let k = 0; k < n; k++) if (r[k] === "x" || (r[k] === "c" && list(sl[k])[0] === info.chosen)) rows.push(k);
      why = `x0 and the chosen candidate ${info.chosen}'s rows`;
    } else if (path.length) {
      rows = [...new Set([0, ...path])].sort((a, b) => a - b);
      why = "the accepted path's rows";
    }
    if (!rows.length || rows.length > R) { rows = [...Array(Math.min(R, n)).keys()].map((k) => n - Math.min(R, n) + k); why = `the last ${rows.length} rows`; }
    return [rows, why];
  }
  function maskSlide(D, s, size) {
    const v = s.mv || {}, P = D.palette, n = Math.min(isNum(v.n) ? v.n : 0, 400), Z = Object.assign({}, SLIDE_MASK, size || {});
    if (!n) return ["", "", 0, 0];
    const [rows, why] = maskRows(D, s, Z.rows), colours = list(v.c), runs = list(v.r);
    // a label is a role and a position ("c2·7"); a crafted one is cut so it cannot push the cells off the slide
    const labels = list(v.l).map((k) => { const t = str(D, k); return t.length > 16 ? t.slice(0, 15) + "…" : t; });
    const sees = (i) => { const r = style(D, runs[i]), on = new Set();
      for (let k = 0; k + 1 < r.length; k += 2) if (isNum(r[k]) && isNum(r[k + 1]) && r[k] >= 0 && r[k + 1] < n)
        for (let j = r[k]; j <= Math.min(r[k + 1], r[k] + 400); j++) on.add(j);
      return on; };
    const vis = rows.map(sees);
    // as many 30 px columns as the width holds beside the widest label (presentation mode sizes Z to its box)
    const widest = Math.max(3, ...labels.map((t) => String(t || "").length)), fit = Math.floor((Z.width - Math.ceil(widest * Z.fs * 0.62) - 24 - (v.kv ? 60 : 0) - 4) / 30);
    const most = Math.max(4, Math.min(Z.cols, fit));
    let cols = [...Array(n).keys()], colWhy = `all ${n} columns`;
    if (n > most) {
      cols = [...new Set(vis.flatMap((o) => [...o]))].sort((a, b) => a - b).slice(-most);
      colWhy = `the ${cols.length} columns these rows may attend to`;
    }
    const chars = Math.max(3, ...rows.concat(cols).map((k) => String(labels[k] || "").length));
    const m = Math.ceil(chars * Z.fs * 0.62) + 24, cache = v.kv ? 2 : 0;
    const c = Math.max(30, Math.min(60, Math.floor((Z.width - m) / (cols.length + cache)), Math.floor((Z.height - m) / rows.length)));
    const cw = cache * c, w = m + cw + cols.length * c + 4, h = m + rows.length * c + 4, out = [];
    out.push(`<rect x="${m + cw}" y="${m}" width="${cols.length * c}" height="${rows.length * c}" fill="${esc(P.mask[0])}"/>`);
    if (cw) out.push(`<rect x="${m}" y="${m}" width="${cw - 2}" height="${rows.length * c}" fill="${esc(P.mask[2])}"><title>KV cache: ${esc(v.kv)} tokens, seen by every query</title></rect>`);
    let d = "";
    rows.forEach((i, y) => cols.forEach((j, x) => { if (vis[y].has(j)) d += `M${m + cw + x * c} ${m + y * c}h${c - 2}v${c - 2}h${2 - c}z`; }));
    out.push(`<path d="${d}" fill="${esc(P.mask[1])}"/>`);
    rows.forEach((i, y) => {
      out.push(`<rect x="${m - 10}" y="${m + y * c}" width="7" height="${c - 2}" fill="${esc(str(D, colours[i]) || "#ccc")}"/>`);
      out.push(`<text x="${m - 14}" y="${m + y * c + c / 2 + Z.fs / 3}" font-size="${Z.fs}" text-anchor="end">${esc(labels[i] || "")}</text>`);
    });
    cols.forEach((j, x) => {
      out.push(`<rect x="${m + cw + x * c}" y="${m - 10}" width="${c - 2}" height="7" fill="${esc(str(D, colours[j]) || "#ccc")}"/>`);
      out.push(`<text transform="translate(${m + cw + x * c + c / 2 + Z.fs / 3},${m - 14}) rotate(-90)" font-size="${Z.fs}">${esc(labels[j] || "")}</text>`);
    });
    const note = `rows shown: ${why} (${rows.length} of ${n}); columns: ${colWhy}` + (v.kv ? `; the ${v.kv}-token cache at the left` : "");
    return [note, `<svg width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">${out.join("")}</svg>`, w, h];
  }

  // ---- Jacobi trajectory (viz/steps/trajectory.py): rows = the last iterations up to this step, columns = positions;
  // a guess is grey until it equals its final token, dark green where it converges, pale green after;
  // the guesses this step accepted are outlined.
  function trajectoryView(D, s) {
    const T = D.trajectory, P = D.palette;
    if (!T || !T.rows.length) return [`Step ${s.i}: no Jacobi trajectory (${D.method})`, ""];
    const past = T.rows.filter((r) => r.s <= s.i);
    if (!past.length) return [`Step ${s.i} (prefill): the first guesses are fed in the next step`, ""];
    // columns: this step's block and the 6 positions before it (their history); rows: the last 10 iterations
    const now = past[past.length - 1].c.map((c) => c[0]);
    const hi = Math.max(...now), lo = Math.max(Math.min(...now) - 6, hi - MAX_COLS);  // bounded: one loop per column
    const rows = past.slice(-10).filter((r) => r.c.some((c) => c[0] >= lo && c[0] <= hi));
    const STATE = { w: "wrong", n: "converges", c: "converged" };
    const WHY = { w: "not (yet) its final token", n: "converges here: its final token from now on", c: "converged earlier" };
    const out = rows.map((r) => {
      const at = {};
      r.c.forEach((c) => (at[c[0]] = c));
      const cells = [];
      for (let p = lo; p <= hi; p++) {
        const c = at[p];
        if (!c) { cells.push("<td class='ds-empty' style='border:none'></td>"); continue; }
        const acc = r.a.includes(p);  // this very guess was accepted (lookahead accepts pool n-grams instead)
        cells.push(cell(D, c[1], p, P.trajectory[STATE[c[2]]], acc ? "ds-hv" : "",
          `step ${r.s}, position ${p}: ${WHY[c[2]]}` + (acc ? "; accepted this step" : "")));
      }
      return `<tr class="${r.s === s.i ? "ds-chosen" : ""}"><th>${r.s === s.i ? "▶ " : ""}step ${esc(r.s)}</th>${cells.join("")}</tr>`;
    });
    const here = rows[rows.length - 1], n = here.a.length, pool = here.p || [];
    const what = esc(T.what);  // said by Python from the data (viz/steps/trajectory.py data: a block or a window)
    // where the pool tokens came from: Python's words from this step's own candidate_sources (viz/steps/pool.py)
    const fromPool = pool.length ? ` and ${pool.length} token(s) from the pool${here.pw ? ", " + esc(here.pw) : ""}: ${esc(pool.join(""))}` : "";
    return [`Trajectory of the ${what}, positions ${lo}–${hi}, last ${rows.length} iteration(s): step ${here.s} accepted ${n} guess(es) (outlined)${fromPool}; ` +
      `run: ${T.right} of ${T.cells} guesses equal their final token`, `<table class="ds-tab">${out.join("")}</table>`];
  }

  // A value plotly shows in a hover label: numbers as they are, anything else escaped (plotly reads markup).
  const plotValue = (v) => (isNum(v) ? v : esc(v));

  // ---- Presentation mode: the tree and the mask redrawn in projector type (F px, unscaled) for a box W px wide,
  // cut to what fits (the title says what is left out; 14 tree rows and 16 mask rows at 1920 wide, 10 below 1600),
  // as the slides do; the tables keep their page drawing.
  function presentView(D, s, v, W, F) {
    if (v === "tree") {  // a level as wide as its longest label (up to 14 characters, as on the page), so a chain of short tokens fits
      const chars = Math.max(3, ...list((s.tv || {}).n).map((row) => str(D, style(D, list(row)[2])[1]).length));
      const dx = Math.ceil(1.5 * F + 8 + 0.62 * F * Math.min(chars, 14)), label = Math.ceil(0.75 * F + 8 + 0.62 * F * Math.min(chars, 30));
      return treeView(D, s, { dx, dy: 2.5 * F, fs: F, r: 0.75 * F, label, rows: F > 20 ? 14 : 10, depth: Math.max(1, Math.floor((W - 16 - label) / dx) + 1) });
    }
    if (v === "mask") {
      const m = s.mv || {};
      const [why, svg] = maskSlide(D, s, { width: W, height: 10 * 30, fs: F, rows: F > 20 ? 16 : 10, cols: 48 });
      return [String(m.t || "") + (why ? ` — ${why}` : ""), svg];
    }
    return VIEWS[v](D, s);
  }

  const VIEWS = { window: windowView, pool: poolView, tree: treeView, mask: maskView, trajectory: trajectoryView };

  // ---- Cost panel: the step on the roofline, its numbers, cumulative FLOPs vs tokens beside greedy.
  function profileView(root, D, s) {
    const pr = D.profile;
    if (!pr || !window.Plotly) return;
    const row = pr.steps.find((r) => r.index === s.i), num = root.querySelector(".ds-prof-num");
    if (num) num.textContent = row ? `step ${row.index}: ${row.n_query} query tokens · ${fmt(row.flops)} FLOPs · ` +
      `${fmt(row.bytes)} bytes (${pr.bytes_counted || "weights"}) · ${fmt(row.ms)} ms · ${fmt(row.intensity)} FLOP/byte · ${fmt(row.achieved)} FLOP/s` +
      (row.bound ? ` · ${row.bound}-bound` : "") : `step ${s.i}: no cost recorded`;
    const pts = pr.steps.filter((r) => r.intensity && r.achieved), cur = row && row.intensity && row.achieved ? [row] : [];
    const roof = pr.roof ? [{ x: pr.roof.intensity, y: pr.roof.attainable, mode: "lines", name: esc(`roof (${pr.roof.device || "machine"})`),
      line: { color: "#444" } }] : [];
    const dot = (r, name, col, size) => ({ x: r.map((p) => p.intensity), y: r.map((p) => p.achieved), mode: "markers", name: esc(name),
      marker: { color: col, size }, customdata: r.map((p) => plotValue(p.index)), hovertemplate: "step %{customdata}<br>%{x:.3s} FLOP/byte<br>%{y:.3s} FLOP/s<extra></extra>" });
    const lay = (title, x, y) => ({ title: { text: title, font: { size: 13 } }, xaxis: x, yaxis: y, height: 320, plot_bgcolor: "white",
      margin: { l: 60, r: 10, t: 40, b: 50 }, legend: { orientation: "h", y: -0.3 } });
    const rf = root.querySelector('.ds-run-plot[data-view="roofline"]');
    if (rf) window.Plotly.react(rf, roof.concat([dot(pts, pr.method + " steps", "#bdbdbd", 6), dot(cur, `step ${s.i}`, pr.color, 14)]),
      lay("This step on the roofline", Object.assign({ title: { text: "arithmetic intensity (FLOP/byte, log)" } }, pr.axes.intensity),
        Object.assign({ title: { text: "achieved FLOP/s (log)" } }, pr.axes.achieved)), CONFIG);
    const cf = root.querySelector('.ds-run-plot[data-view="cumflops"]');
    const line = { x: pr.steps.map((r) => r.cum_tokens), y: pr.steps.map((r) => r.cum_flops), mode: "lines+markers", name: esc(pr.method),
      line: { color: pr.color, shape: "hv" }, marker: { size: 4 }, customdata: pr.steps.map((r) => plotValue(r.index)),
      hovertemplate: "step %{customdata}<br>%{x} tokens<br>%{y:.3s} FLOPs<extra></extra>" };
    const g = pr.greedy ? [{ x: pr.greedy.tokens, y: pr.greedy.flops, mode: "lines", name: "greedy (1 token per step)",
      line: { color: pr.greedy_color, dash: "dash" } }] : [];
    const here = row ? [{ x: [row.cum_tokens], y: [row.cum_flops], mode: "markers", name: esc(`after step ${s.i}`),
      marker: { size: 14, color: "rgba(0,0,0,0)", line: { color: D.palette.current, width: 3 } } }] : [];
    if (cf) window.Plotly.react(cf, [line].concat(g, here), lay("FLOPs spent vs tokens produced", { title: { text: "new tokens produced" } },
      { title: { text: "cumulative FLOPs" }, rangemode: "tozero", exponentformat: "SI" }), CONFIG);
  }

  return { VIEWS, profileView, esc, treeView, maskSlide, presentView };
})();
