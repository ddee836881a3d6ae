// Markdown for answers. Safe by construction: every piece of model text goes through escapeHtml()
// before any tag is added; links only for http(s) URLs.
"use strict";

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
