// Strata web app, shared pieces: localStorage, API calls with the key (and the key box on 401),
// number formatting. Classic scripts loaded in order (common, markdown, chat, monitor, about, app) share
// these globals; no dependencies, no build step.
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
  $("#key-input").select();
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
