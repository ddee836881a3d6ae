// About view: model, addresses and copyable client examples, engine settings (from /v1/monitor).
"use strict";

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
