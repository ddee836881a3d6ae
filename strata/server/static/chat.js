// Chat view: conversations in localStorage (list, new, rename, delete), answers streamed over SSE from
// /v1/chat/completions, Stop (aborting the fetch makes the server cancel the request in the engine),
// the settings drawer. Model and user text reach the page through textContent or renderMarkdown().
"use strict";

// ---------------------------------------------------------------- conversations

let conversations = load(STORE.convs, []);
for (const m of conversations.flatMap((c) => c.messages)) {
  if (m.pending) { delete m.pending; m.error = "(interrupted: the page was closed while the answer streamed)"; }
}
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
      setSidebar(false);
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
  const message = { role: "assistant", content: "", reasoning: "", pending: true };
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
  let firstTokenAt = null, usage = null, finish = null;
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
      finish = event.choices[0].finish_reason || finish;
      renderSoon();
    }
  } catch (err) {
    if (err.name === "AbortError") message.error = "(stopped)";
    else {
      message.error = friendlyError(err);
      showChatError(message.error);
    }
  } finally {
    message.meta = answerMeta(started, firstTokenAt, usage, finish);
    delete message.pending;
    streaming = null;
    if (!message.content && !message.reasoning && !message.error) message.error = "(no output)";
    conv.updated = Date.now();
    persist();
    if (conv === current()) renderMessages();
  }
}

function answerMeta(started, firstTokenAt, usage, finish) {
  const parts = [];
  if (firstTokenAt) parts.push(`first token ${((firstTokenAt - started) / 1000).toFixed(2)} s`);
  if (usage) {
    const seconds = (performance.now() - (firstTokenAt || started)) / 1000;
    parts.push(`${usage.completion_tokens} tokens`);
    if (seconds > 0 && usage.completion_tokens > 1) parts.push(`${(usage.completion_tokens / seconds).toFixed(1)} tok/s`);
    if (usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens)
      parts.push(`${usage.prompt_tokens_details.cached_tokens}/${usage.prompt_tokens} prompt tokens reused`);
  }
  if (finish === "length") parts.push("cut at max tokens");
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
$("#new-chat").addEventListener("click", () => {
  if (streaming) return;
  setSidebar(false);
  if (current() && !current().messages.length) $("#prompt").focus();   // the current chat is still empty
  else newConversation();
});

// On a phone the conversation list is an overlay: ☰ opens it, ✕ / Escape / picking a chat closes it.
function setSidebar(open) {
  const wasOpen = $("#sidebar").classList.contains("open");
  $("#sidebar").classList.toggle("open", open);
  $("#toggle-sidebar").setAttribute("aria-expanded", String(open));
  if (open) $("#new-chat").focus();
  else if (wasOpen) $("#toggle-sidebar").focus();
}
$("#toggle-sidebar").addEventListener("click", () => setSidebar(!$("#sidebar").classList.contains("open")));
$("#close-sidebar").addEventListener("click", () => setSidebar(false));
$("#sidebar").addEventListener("keydown", (e) => { if (e.key === "Escape") setSidebar(false); });

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
