// Strata web app entry: hash routing between the views, light/dark theme, the engine badge, start-up.
"use strict";

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
