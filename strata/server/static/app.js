// Strata web app: Chat (conversations in localStorage, streamed over SSE), Monitor (polls /v1/monitor
// every second) and About. No dependencies, no build step. Every piece of model or user text reaches
// the page through escapeHtml() or textContent: the Markdown renderer escapes first, then adds tags.
"use strict";

const $ = (sel) => document.querySelector(sel);
const STORE = { key: "strata.apiKey", convs: "strata.conversations", current: "strata.current",
                settings: "strata.settings", theme: "strata.theme" };
const DEFAULT_SETTINGS = { system: "", temperature: 0.7, top_p: 1, max_tokens: "", thinking: "" };

function load(key, fallback) {
  try { const v = JSON.parse(localStorage.getItem(key)); return v === null ? fallback : v; }
  catch { return fallback; }
}
function save(key, value) { localStorage.setItem(key, JSON.stringify(value)); }

// ---------------------------------------------------------------- API access + key box

class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function authHeaders() {
  const key = load(STORE.key, "");
  return key ? { Authorization: "Bearer " + key } : {};
}

async function errorMessage(res) {
  try {
    const body = await res.json();
    return (body.error && (body.error.message || body.error)) || JSON.stringify(body);
  } catch { return res.statusText || "HTTP " + res.status; }
}

async function api(path, options = {}) {
  const res = await fetch(path, { ...options, headers: { ...authHeaders(), ...(options.headers || {}) } });
  if (res.status === 401) showKeyBox();
  if (!res.ok) throw new HttpError(res.status, await errorMessage(res));
  return res;
}

let keyBoxReturnFocus = null;
function showKeyBox() {
  const box = $("#key-box");
  if (!box.hidden) return;
  keyBoxReturnFocus = document.activeElement;
  box.hidden = false;
  $("#key-input").value = load(STORE.key, "");
  $("#key-input").focus();
}
function hideKeyBox() {
  $("#key-box").hidden = true;
  if (keyBoxReturnFocus) keyBoxReturnFocus.focus();
}
$("#key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  save(STORE.key, $("#key-input").value.trim());
  hideKeyBox();
  $("#chat-error").hidden = true;
  refreshStatus();
  if (currentView === "monitor") pollMonitor();
  if (currentView === "about") renderAbout();
});
$("#key-cancel").addEventListener("click", hideKeyBox);
$("#key-box").addEventListener("keydown", (e) => { if (e.key === "Escape") hideKeyBox(); });
$("#forget-key").addEventListener("click", () => { localStorage.removeItem(STORE.key); refreshStatus(); });

// ---------------------------------------------------------------- Markdown (escape first, then format)

function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function inline(text) {
  // `text` is raw; code spans are cut out first so nothing inside them is formatted.
  const parts = text.split(/(`[^`\n]+`)/);
  return parts.map((part, i) => {
    if (i % 2 === 1) return "<code>" + escapeHtml(part.slice(1, -1)) + "</code>";
    let s = escapeHtml(part);
    s = s.replace(/\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g,
                  (_, label, url) => `<a href="${url}" target="_blank" rel="noopener noreferrer">${label}</a>`);
    s = s.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>");
    s = s.replace(/(^|[^*\w])\*([^*\s][^*]*)\*(?!\w)/g, "$1<em>$2</em>");
    s = s.replace(/~~([^~]+)~~/g, "<del>$1</del>");
    return s;
  }).join("");
}

function codeBlock(code, lang) {
  const label = lang ? `<span class="lang">${escapeHtml(lang)}</span>` : "";
  return `<div class="codeblock">${label}<button type="button" class="copy" aria-label="Copy code">Copy</button>` +
         `<pre><code>${escapeHtml(code)}</code></pre></div>`;
}

function sameListAhead(lines, i, ordered) {
  while (i < lines.length && !lines[i].trim()) i++;
  const m = i < lines.length && lines[i].match(/^\s*([-*+]|\d+[.)])\s+/);
  return Boolean(m) && /\d/.test(m[1]) === ordered;
}

function renderMarkdown(src) {
  const lines = src.replace(/\r\n/g, "\n").split("\n");
  const out = [];
  let i = 0;
  const isBlockStart = (l) => /^(```|#{1,6}\s|>\s?|\s*([-*+]|\d+[.)])\s+|\s*(---|\*\*\*)\s*$)/.test(l);
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*```\s*([\w+#.-]*)/);
    if (fence) {
      const code = [];
      i++;
      while (i < lines.length && !/^\s*```\s*$/.test(lines[i])) code.push(lines[i++]);
      i++;  // the closing fence (or the end of a still-streaming block)
      out.push(codeBlock(code.join("\n"), fence[1]));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      const level = Math.min(heading[1].length + 2, 6);  // h1/h2 belong to the page
      out.push(`<h${level}>${inline(heading[2])}</h${level}>`);
      i++;
      continue;
    }
    if (/^\s*(---|\*\*\*)\s*$/.test(line)) { out.push("<hr>"); i++; continue; }
    if (/^>\s?/.test(line)) {
      const quote = [];
      while (i < lines.length && /^>\s?/.test(lines[i])) quote.push(lines[i++].replace(/^>\s?/, ""));
      out.push("<blockquote>" + renderMarkdown(quote.join("\n")) + "</blockquote>");
      continue;
    }
    const item = line.match(/^\s*([-*+]|\d+[.)])\s+/);
    if (item) {
      const ordered = /\d/.test(item[1]);
      const items = [];
      while (i < lines.length) {
        const m = lines[i].match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
        if (m && /\d/.test(m[1]) === ordered) { items.push(m[2]); i++; }
        else if (items.length && /^\s{2,}\S/.test(lines[i])) { items[items.length - 1] += " " + lines[i].trim(); i++; }
        else if (!lines[i].trim() && sameListAhead(lines, i, ordered)) i++;   // a loose list: blank lines between items
        else break;
      }
      const start = ordered && parseInt(item[1], 10) !== 1 ? ` start="${parseInt(item[1], 10)}"` : "";
      const tag = ordered ? "ol" : "ul";
      out.push(`<${tag}${start}>` + items.map((t) => `<li>${inline(t)}</li>`).join("") + `</${tag}>`);
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const para = [];
    while (i < lines.length && lines[i].trim() && !(para.length && isBlockStart(lines[i]))) para.push(lines[i++]);
    out.push("<p>" + para.map(inline).join("<br>") + "</p>");
  }
  return out.join("\n");
}

document.addEventListener("click", async (e) => {
  const button = e.target.closest(".copy, .copy-example");
  if (!button) return;
  const code = button.parentElement.querySelector("code");
  try {
    await navigator.clipboard.writeText(code.textContent);
    button.textContent = "Copied";
  } catch {
    const range = document.createRange();
    range.selectNodeContents(code);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    button.textContent = "Selected: press Ctrl+C";
  }
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
});

// ---------------------------------------------------------------- conversations

let conversations = load(STORE.convs, []);
let currentId = load(STORE.current, null);
let streaming = null;   // {controller, conv, message} while an answer streams

function newId() { return Date.now().toString(36) + Math.random().toString(36).slice(2, 7); }
function current() { return conversations.find((c) => c.id === currentId) || null; }
function persist() { save(STORE.convs, conversations); save(STORE.current, currentId); }

function newConversation() {
  const conv = { id: newId(), title: "New chat", messages: [], created: Date.now(), updated: Date.now() };
  conversations.unshift(conv);
  currentId = conv.id;
  persist();
  renderConversations();
  renderMessages();
  $("#prompt").focus();
  return conv;
}

function renderConversations() {
  const list = $("#conv-list");
  list.replaceChildren();
  for (const conv of conversations) {
    const li = document.createElement("li");
    li.className = conv.id === currentId ? "current" : "";
    const open = document.createElement("button");
    open.type = "button";
    open.className = "conv-open";
    open.textContent = conv.title;
    open.title = conv.title;
    if (conv.id === currentId) open.setAttribute("aria-current", "true");
    open.addEventListener("click", () => {
      currentId = conv.id; persist(); renderConversations(); renderMessages();
      $("#view-chat .sidebar").classList.remove("open");
    });
    const rename = actionButton("✎", `Rename “${conv.title}”`, () => startRename(li, conv));
    const del = actionButton("✕", `Delete “${conv.title}”`, () => deleteConversation(conv));
    li.append(open, rename, del);
    list.append(li);
  }
  $("#chat-title").textContent = current() ? current().title : "New chat";
}

function actionButton(symbol, label, onClick) {
  const b = document.createElement("button");
  b.type = "button"; b.className = "conv-action"; b.textContent = symbol;
  b.setAttribute("aria-label", label); b.title = label;
  b.addEventListener("click", onClick);
  return b;
}

function startRename(li, conv) {
  const input = document.createElement("input");
  input.value = conv.title;
  input.setAttribute("aria-label", "Conversation name (Enter saves, Escape cancels)");
  li.replaceChildren(input);
  input.focus(); input.select();
  let done = false;
  const finish = (keep) => {
    if (done) return;
    done = true;
    if (keep && input.value.trim()) { conv.title = input.value.trim(); conv.updated = Date.now(); persist(); }
    renderConversations();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") finish(true);
    if (e.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true));
}

function deleteConversation(conv) {
  if (!confirm(`Delete the conversation “${conv.title}”?`)) return;
  if (streaming && streaming.conv === conv) streaming.controller.abort();
  conversations = conversations.filter((c) => c !== conv);
  if (currentId === conv.id) currentId = conversations.length ? conversations[0].id : null;
  persist();
  renderConversations();
  renderMessages();
}

function messageNode(msg, live) {
  const node = document.createElement("div");
  node.className = "msg " + msg.role;
  const who = document.createElement("div");
  who.className = "who";
  who.textContent = msg.role === "user" ? "You" : "Assistant";
  node.append(who);
  if (msg.reasoning) {
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = live && !msg.content ? "Thinking…" : "Thought process";
    const thinking = document.createElement("div");
    thinking.className = "thinking";
    thinking.textContent = msg.reasoning;
    details.append(summary, thinking);
    node.append(details);
  }
  const body = document.createElement("div");
  body.className = "body" + (live ? " cursor" : "");
  if (msg.role === "user") body.textContent = msg.content;
  else body.innerHTML = renderMarkdown(msg.content || "");
  node.append(body);
  if (msg.error) {
    const err = document.createElement("div");
    err.className = "msg-error";
    err.textContent = msg.error;
    node.append(err);
  }
  if (msg.meta) {
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = msg.meta;
    node.append(meta);
  }
  return node;
}

function renderMessages() {
  const box = $("#messages");
  const conv = current();
  box.replaceChildren();
  if (!conv || !conv.messages.length) {
    const empty = document.createElement("p");
    empty.className = "empty";
    empty.textContent = "Ask the model something. Conversations stay in this browser.";
    box.append(empty);
  } else {
    for (const msg of conv.messages) {
      box.append(messageNode(msg, streaming && streaming.message === msg));
    }
  }
  box.scrollTop = box.scrollHeight;
  const busy = Boolean(streaming && streaming.conv === conv);
  $("#send").hidden = busy;
  $("#stop").hidden = !busy;
}

let renderQueued = false;
function renderSoon() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => { renderQueued = false; updateLiveMessage(); });
}
function updateLiveMessage() {
  if (!streaming || streaming.conv !== current()) return;
  const box = $("#messages");
  const last = box.lastElementChild;
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  if (last) last.replaceWith(messageNode(streaming.message, true));
  if (atBottom) box.scrollTop = box.scrollHeight;
}

// ---------------------------------------------------------------- sending + streaming

let settings = { ...DEFAULT_SETTINGS, ...load(STORE.settings, {}) };
let modelName = null;

function requestBody(conv) {
  const messages = [];
  if (settings.system.trim()) messages.push({ role: "system", content: settings.system });
  for (const m of conv.messages) {
    if (m.role === "user" || (m.role === "assistant" && m.content)) messages.push({ role: m.role, content: m.content });
  }
  const body = { model: modelName, messages, stream: true, stream_options: { include_usage: true },
                 temperature: Number(settings.temperature), top_p: Number(settings.top_p) };
  if (settings.max_tokens) body.max_tokens = Number(settings.max_tokens);
  if (settings.thinking) body.reasoning_effort = settings.thinking;
  return body;
}

function friendlyError(err) {
  if (err instanceof HttpError) {
    if (err.status === 401) return "The server needs an API key (401). Enter it in the box and send again.";
    if (err.status === 503) return "The engine is starting or restarting (503): try again in a few seconds. " + err.message;
    if (err.status === 400) return "The server refused the request (400): " + err.message;
    return `Error ${err.status}: ${err.message}`;
  }
  return "Could not reach the server: " + err.message;
}

async function send(text) {
  let conv = current() || newConversation();
  if (!modelName) await refreshStatus();
  if (conv.title === "New chat") conv.title = text.slice(0, 48).replace(/\s+/g, " ");
  conv.messages.push({ role: "user", content: text });
  const message = { role: "assistant", content: "", reasoning: "" };
  const body = requestBody(conv);
  conv.messages.push(message);
  conv.updated = Date.now();
  const controller = new AbortController();
  streaming = { controller, conv, message };
  $("#chat-error").hidden = true;
  persist();
  renderConversations();
  renderMessages();
  const started = performance.now();
  let firstTokenAt = null, usage = null;
  try {
    const res = await api("/v1/chat/completions", {
      method: "POST", signal: controller.signal,
      headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    for await (const event of sseEvents(res)) {
      if (event.error) throw new HttpError(event.error.code || 500, event.error.message || "stream error");
      if (event.usage) usage = event.usage;
      const delta = event.choices && event.choices[0] && event.choices[0].delta;
      if (!delta) continue;
      if (delta.content || delta.reasoning_content) firstTokenAt = firstTokenAt || performance.now();
      if (delta.content) message.content += delta.content;
      if (delta.reasoning_content) message.reasoning += delta.reasoning_content;
      if (event.choices[0].finish_reason === "length") message.error = "(stopped at max tokens)";
      renderSoon();
    }
  } catch (err) {
    if (err.name === "AbortError") message.error = "(stopped)";
    else {
      message.error = friendlyError(err);
      showChatError(message.error);
    }
  } finally {
    message.meta = answerMeta(started, firstTokenAt, usage);
    streaming = null;
    if (!message.content && !message.reasoning && !message.error) message.error = "(no output)";
    conv.updated = Date.now();
    persist();
    if (conv === current()) renderMessages();
  }
}

function answerMeta(started, firstTokenAt, usage) {
  const parts = [];
  if (firstTokenAt) parts.push(`first token ${((firstTokenAt - started) / 1000).toFixed(2)} s`);
  if (usage) {
    const seconds = (performance.now() - (firstTokenAt || started)) / 1000;
    parts.push(`${usage.completion_tokens} tokens`);
    if (seconds > 0 && usage.completion_tokens > 1) parts.push(`${(usage.completion_tokens / seconds).toFixed(1)} tok/s`);
    if (usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens)
      parts.push(`${usage.prompt_tokens_details.cached_tokens}/${usage.prompt_tokens} prompt tokens reused`);
  }
  return parts.join(" · ");
}

async function* sseEvents(res) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  while (true) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      yield JSON.parse(data);
    }
  }
}

function showChatError(text) {
  const box = $("#chat-error");
  box.textContent = text;
  box.hidden = false;
}

$("#composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("#prompt").value.trim();
  if (!text || streaming) return;
  $("#prompt").value = "";
  send(text);
});
$("#prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $("#composer").requestSubmit();
  }
});
$("#stop").addEventListener("click", () => { if (streaming) streaming.controller.abort(); $("#prompt").focus(); });
$("#new-chat").addEventListener("click", () => { if (!streaming) newConversation(); });
$("#toggle-sidebar").addEventListener("click", (e) => {
  const open = $("#view-chat .sidebar").classList.toggle("open");
  e.currentTarget.setAttribute("aria-expanded", String(open));
});

// ---------------------------------------------------------------- settings drawer

function bindSetting(id, key, outputId) {
  const input = $(id);
  input.value = settings[key];
  const show = () => { if (outputId) $(outputId).textContent = input.value; };
  show();
  input.addEventListener("input", () => { settings[key] = input.value; save(STORE.settings, settings); show(); });
}
bindSetting("#set-system", "system");
bindSetting("#set-temperature", "temperature", "#out-temperature");
bindSetting("#set-top-p", "top_p", "#out-top-p");
bindSetting("#set-max-tokens", "max_tokens");
bindSetting("#set-thinking", "thinking");

function setDrawer(open) {
  $("#settings").hidden = !open;
  $("#open-settings").setAttribute("aria-expanded", String(open));
  (open ? $("#set-system") : $("#open-settings")).focus();
}
$("#open-settings").addEventListener("click", () => setDrawer($("#settings").hidden));
$("#close-settings").addEventListener("click", () => setDrawer(false));
$("#settings").addEventListener("keydown", (e) => { if (e.key === "Escape") setDrawer(false); });

// ---------------------------------------------------------------- engine badge

async function refreshStatus() {
  const badge = $("#engine-badge");
  try {
    const status = await (await api("/v1/status")).json();
    modelName = status.model;
    const ready = status.engine.state === "ready";
    badge.querySelector(".badge-model").textContent = status.model;
    badge.querySelector(".badge-state").textContent = ready ? "ready" : status.engine.state;
    badge.className = "badge " + (ready ? "ok" : "bad");
  } catch (err) {
    badge.querySelector(".badge-model").textContent = "";
    badge.querySelector(".badge-state").textContent = err.status === 401 ? "API key needed" : "server unreachable";
    badge.className = "badge bad";
  }
}

// ---------------------------------------------------------------- monitor

let monitorTimer = null;
const fmt = {
  num: (v, digits = 0) => (v === null || v === undefined || Number.isNaN(v) ? "n/a" : Number(v).toFixed(digits)),
  pct: (v) => (v === null || v === undefined ? "n/a" : (100 * v).toFixed(1) + " %"),
  bytes: (v) => {
    if (v === null || v === undefined) return "n/a";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return v.toFixed(i ? 1 : 0) + " " + units[i];
  },
  secs: (v) => (v === null || v === undefined ? "n/a" : v < 1 ? (v * 1000).toFixed(0) + " ms" : v.toFixed(2) + " s"),
};

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

// ---------------------------------------------------------------- about

function example(title, code) {
  const wrap = document.createElement("div");
  wrap.className = "example codeblock";
  wrap.innerHTML = `<h3>${escapeHtml(title)}</h3><button type="button" class="copy-example copy" aria-label="Copy: ${escapeHtml(title)}">Copy</button>` +
                   `<pre><code>${escapeHtml(code)}</code></pre>`;
  return wrap;
}

async function renderAbout() {
  const origin = location.origin;
  let m;
  try { m = await (await api("/v1/monitor")).json(); }
  catch (err) { fillList("#a-model", [["error", friendlyError(err)]]); return; }
  const e = m.engine;
  fillList("#a-model", [["served name", m.model], ["architecture", e.architecture || "n/a"],
                        ["context (max_model_len)", fmt.num(e.max_model_len)], ["vocabulary", fmt.num(e.vocab_size)],
                        ["device / dtype", `${e.device || "n/a"} / ${e.dtype || "n/a"}`],
                        ["KV blocks", fmt.num(e.num_kv_blocks)], ["engine", `${e.state}, pid ${e.pid}, ${e.restarts} restarts`],
                        ["uptime", `${(m.uptime_s / 60).toFixed(1)} min`]]);
  fillList("#a-urls", [["OpenAI base URL", origin + "/v1"], ["Anthropic base URL", origin],
                       ["Prometheus", origin + "/metrics"]]);
  const key = load(STORE.key, "") ? "YOUR-KEY" : "not-needed";
  const model = JSON.stringify(m.model);
  const examples = $("#a-examples");
  examples.replaceChildren(
    example("curl", `curl ${origin}/v1/chat/completions \\\n  -H "Authorization: Bearer ${key}" \\\n` +
                    `  -H 'content-type: application/json' \\\n  -d '{"model": ${model}, "max_tokens": 64,\n` +
                    `       "messages": [{"role": "user", "content": "Hi!"}]}'`),
    example("Python (openai)", `from openai import OpenAI\n\nclient = OpenAI(base_url="${origin}/v1",\n` +
                               `                api_key="${key}")\n` +
                               `reply = client.chat.completions.create(\n    model=${model}, max_tokens=64,\n` +
                               `    messages=[{"role": "user", "content": "Hi!"}])\nprint(reply.choices[0].message.content)`),
    example("Python (anthropic)", `import anthropic\n\nclient = anthropic.Anthropic(base_url="${origin}",\n` +
                                  `                             api_key="${key}")\n` +
                                  `message = client.messages.create(\n    model=${model}, max_tokens=64,\n` +
                                  `    messages=[{"role": "user", "content": "Hi!"}])\nprint(message.content[0].text)`));
  const config = $("#a-config");
  config.replaceChildren();
  for (const [group, values] of Object.entries(e.config || {})) {
    const div = document.createElement("div");
    div.className = "config-group";
    const h = document.createElement("h3");
    h.textContent = group;
    div.append(h);
    if (values && typeof values === "object") {
      const dl = document.createElement("dl");
      for (const [k, v] of Object.entries(values)) {
        const dt = document.createElement("dt"); dt.textContent = k;
        const dd = document.createElement("dd"); dd.textContent = v === null ? "—" : String(v);
        dl.append(dt, dd);
      }
      div.append(dl);
    } else h.textContent = `${group}: ${values || "(default)"}`;
    config.append(div);
  }
}

// ---------------------------------------------------------------- views + theme

let currentView = "chat";
function showView() {
  const name = (location.hash || "#chat").slice(1);
  currentView = ["chat", "monitor", "about"].includes(name) ? name : "chat";
  for (const v of ["chat", "monitor", "about"]) $("#view-" + v).hidden = v !== currentView;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.view === currentView) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (currentView === "monitor") pollMonitor();
  if (currentView === "about") renderAbout();
}
window.addEventListener("hashchange", showView);

function applyTheme() {
  const theme = load(STORE.theme, null);
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}
$("#theme-toggle").addEventListener("click", () => {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  save(STORE.theme, dark ? "light" : "dark");
  applyTheme();
  if (lastMonitor && currentView === "monitor") drawChart(lastMonitor.throughput.history_tok_s);
});

applyTheme();
renderConversations();
renderMessages();
showView();
refreshStatus();
setInterval(refreshStatus, 10000);
