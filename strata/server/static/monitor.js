// Monitor view: polls /v1/monitor every second while visible and draws the tok/s history on a canvas.
"use strict";

// ---------------------------------------------------------------- monitor

let monitorTimer = null;

function fillList(id, rows) {
  const dl = $(id);
  dl.replaceChildren();
  for (const [label, value, testId] of rows) {
    const dt = document.createElement("dt");
    dt.textContent = label;
    const dd = document.createElement("dd");
    dd.textContent = value;
    if (testId) dd.dataset.testid = testId;
    dl.append(dt, dd);
  }
}

function renderMonitor(m) {
  const act = m.activity;
  const labels = { idle: "Idle", reading_prompt: "Reading prompt", generating: "Generating" };
  const stateEl = $("#m-state");
  stateEl.textContent = labels[act.state] || `Engine ${act.state}`;
  stateEl.className = "big " + ({ generating: "state-generating", reading_prompt: "state-reading", idle: "" }[act.state] ?? "state-bad");
  const progress = $("#m-progress");
  const reading = (act.requests || []).filter((r) => r.output_tokens === 0);
  const fraction = reading.length === 1 ? reading[0].prompt_progress : null;
  progress.hidden = act.state !== "reading_prompt";
  progress.classList.toggle("known", typeof fraction === "number");
  progress.firstElementChild.style.width = typeof fraction === "number" ? `${(100 * fraction).toFixed(0)}%` : "";
  let detail = "";
  if (act.requests && act.requests.length) {
    const gen = act.requests.filter((r) => r.output_tokens > 0);
    if (reading.length) {
      const r = reading[0];
      detail += `${reading.length} reading: ${r.prompt_tokens} prompt tokens` +
                (r.cached_tokens ? ` (${r.cached_tokens} reused)` : "") +
                (typeof r.prompt_progress === "number" ? `, ${(100 * r.prompt_progress).toFixed(0)} % read` : "") +
                `, ${fmt.secs(r.elapsed_s)} so far. `;
    }
    if (gen.length) detail += `${gen.length} generating: ${gen.map((r) => r.output_tokens).join(", ")} tokens out.`;
  } else if (m.engine.last_error && act.state !== "idle") detail = m.engine.last_error;
  $("#m-state-detail").textContent = detail;
  $("#m-tok-s").textContent = `now ${fmt.num(m.throughput.last_tok_s)} · 10 s mean ${fmt.num(m.throughput.mean_tok_s_10s, 1)}`;
  drawChart(m.throughput.history_tok_s);

  fillList("#m-slots", [["running", fmt.num(m.slots.running), "m-running"], ["free", fmt.num(m.slots.free)],
                        ["total", fmt.num(m.slots.total)], ["waiting in queue", fmt.num(m.slots.waiting)],
                        ["requests served", fmt.num(m.throughput.total_requests), "m-total-requests"]]);
  const kv = m.kv_blocks;
  const used = kv.total ? (kv.total - kv.free) / kv.total : null;
  fillList("#m-kv", [["blocks used", kv.total ? `${kv.total - kv.free} / ${kv.total}` : "n/a"], ["use", fmt.pct(used)]]);
  const spec = m.speculation;
  fillList("#m-spec", [["method", spec.method || "off"],
                       ["mean accepted length", spec.num_verify_windows ? fmt.num(spec.mean_accepted_length, 2) : "n/a"],
                       ["drafted / accepted", spec.num_verify_windows ? `${spec.num_draft_tokens} / ${spec.num_accepted_tokens}` : "n/a"]]);
  const bars = $("#m-spec-bars");
  bars.replaceChildren();
  for (const [i, rate] of (spec.acceptance_per_position || []).entries()) {
    const bar = document.createElement("div");
    bar.style.height = Math.max(2, 100 * rate) + "%";
    bar.title = `position ${i + 1}: ${(100 * rate).toFixed(0)} % accepted`;
    bars.append(bar);
  }
  bars.setAttribute("aria-label", "Acceptance per draft position: " +
    ((spec.acceptance_per_position || []).map((r, i) => `${i + 1}: ${(100 * r).toFixed(0)}%`).join(", ") || "n/a"));
  const c = m.cache;
  fillList("#m-cache", [["prompt tokens reused", fmt.num(c.prompt_tokens_reused), "m-reused"],
                        ["prefix hits / queries", c.prefix_queries !== undefined ? `${c.prefix_hits} / ${c.prefix_queries}` : "n/a"],
                        ["blocks parked / restored", c.blocks_parked !== undefined ? `${c.blocks_parked} / ${c.blocks_restored}` : "n/a"]]);
  const e = m.experts;
  fillList("#m-experts", e ? Object.entries(e).map(([k, v]) => [k.replace(/_/g, " "), typeof v === "number" && v <= 1 ? fmt.pct(v) : String(v)])
                           : [["expert hit rate", "n/a"], ["CPU / PCIe share", "n/a"]]);
  const g = m.gpu;
  fillList("#m-gpu", g ? [["device", g.name], ["memory", `${fmt.bytes(g.mem_used_bytes)} / ${fmt.bytes(g.mem_total_bytes)}`],
                          ["utilisation", fmt.pct(g.utilization)]]
                       : [["device", m.engine.device || "n/a"], ["memory", "n/a"], ["utilisation", "n/a"]]);
  const h = m.host;
  fillList("#m-host", [["CPU busy", fmt.pct(h.cpu_busy)], ["CPUs", fmt.num(h.num_cpus)], ["load (1 min)", fmt.num(h.load_1m, 2)],
                       ["RAM used", h.mem_total_bytes ? `${fmt.bytes(h.mem_total_bytes - h.mem_available_bytes)} / ${fmt.bytes(h.mem_total_bytes)}` : "n/a"],
                       ["engine RSS", fmt.bytes(h.engine_rss_bytes)]]);
  const tbody = $("#m-requests tbody");
  tbody.replaceChildren();
  for (const r of m.recent_requests) {
    const tr = document.createElement("tr");
    for (const v of [r.id, r.prompt_tokens, r.cached_tokens, r.output_tokens, fmt.secs(r.ttft_s),
                     fmt.num(r.decode_tok_s, 1), fmt.secs(r.elapsed_s), r.finish_reason]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.append(td);
    }
    tbody.append(tr);
  }
  if (!m.recent_requests.length) {
    const tr = document.createElement("tr");
    tr.innerHTML = '<td colspan="8" class="muted">none yet</td>';
    tbody.append(tr);
  }
}

function niceCeiling(v) {
  // The y-axis top: 1, 2, 2.5 or 5 times a power of ten, so the four grid steps are round numbers.
  const power = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((k) => k * power).find((top) => top >= v);
}

function drawChart(values) {
  const canvas = $("#m-chart");
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  if (!width) return;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  const style = getComputedStyle(document.documentElement);
  const max = niceCeiling(Math.max(4, ...values));
  const left = 36, bottom = 18, plotW = width - left - 4, plotH = height - bottom - 6;
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = style.getPropertyValue("--muted");
  ctx.strokeStyle = style.getPropertyValue("--chart-grid");
  ctx.lineWidth = 1;
  for (let k = 0; k <= 4; k++) {
    const y = 6 + plotH - (plotH * k) / 4;
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(width - 4, y); ctx.stroke();
    const tick = (max * k) / 4;
    ctx.fillText(Number.isInteger(tick) ? String(tick) : tick.toFixed(1), 2, y + 4);
  }
  ctx.textAlign = "left";
  ctx.fillText(`-${values.length / 60} min`, left, height - 4);
  ctx.textAlign = "right";
  ctx.fillText("now", width - 4, height - 4);
  const oneMinute = left + plotW * (1 - 60 / values.length);
  ctx.textAlign = "center";
  if (width - 4 - oneMinute > 60) ctx.fillText("-1 min", oneMinute, height - 4);
  ctx.textAlign = "left";
  const accent = style.getPropertyValue("--chart");
  ctx.beginPath();
  values.forEach((v, i) => {
    const x = left + (plotW * i) / (values.length - 1);
    const y = 6 + plotH - (plotH * v) / max;
    if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y);
  });
  ctx.strokeStyle = accent;
  ctx.lineWidth = 1.5;
  ctx.stroke();
  ctx.lineTo(left + plotW, 6 + plotH);
  ctx.lineTo(left, 6 + plotH);
  ctx.closePath();
  ctx.globalAlpha = 0.15;
  ctx.fillStyle = accent;
  ctx.fill();
  ctx.globalAlpha = 1;
}

let lastMonitor = null;
async function pollMonitor() {
  clearTimeout(monitorTimer);
  if (currentView !== "monitor") return;
  try {
    lastMonitor = await (await api("/v1/monitor")).json();
    renderMonitor(lastMonitor);
  } catch (err) {
    $("#m-state").textContent = err.status === 401 ? "API key needed" : "Server unreachable";
    $("#m-state").className = "big state-bad";
    $("#m-state-detail").textContent = err.message;
  }
  monitorTimer = setTimeout(pollMonitor, 1000);
}
window.addEventListener("resize", () => { if (lastMonitor && currentView === "monitor") drawChart(lastMonitor.throughput.history_tok_s); });
