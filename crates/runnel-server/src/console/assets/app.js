// The Runnel console: streams, their history and live tail, and the
// cluster. Everything from a stream is shown as text (textContent), never
// parsed as HTML; the server also forbids inline scripts (CSP).
"use strict";

const main = document.getElementById("main");
const statusLine = document.getElementById("status");
const tokenInput = document.getElementById("token");
tokenInput.value = sessionStorage.getItem("runnel-token") || "";
tokenInput.addEventListener("change", () => {
  sessionStorage.setItem("runnel-token", tokenInput.value);
  route();
});

let cleanup = () => {};

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function say(text, isError = false) {
  statusLine.textContent = text;
  statusLine.className = isError ? "error" : "";
}

function headers(extra = {}) {
  const h = { ...extra };
  if (tokenInput.value) h["authorization"] = "Bearer " + tokenInput.value;
  return h;
}

async function call(method, url, { body, headers: extra } = {}) {
  const response = await fetch(url, { method, body, headers: headers(extra) });
  if (!response.ok && response.status !== 304) {
    const reason = (await response.text()).trim();
    throw new Error(`${method} ${url}: ${response.status} ${reason}`);
  }
  return response;
}

const streamUrl = (name) => "/v1/stream/" + name.split("/").map(encodeURIComponent).join("/");
const isJson = (ct) => (ct || "").split(";")[0].trim().toLowerCase() === "application/json";
const isText = (ct) => /^text\/|json|xml|javascript/i.test((ct || "").split(";")[0]);

// One message or chunk as text: JSON pretty-printed, text as text,
// anything else as hex.
function renderItem(value) {
  return el("li", {}, el("pre", {}, value));
}

function hex(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const row = Array.from(bytes.slice(i, i + 16), (b) => b.toString(16).padStart(2, "0"));
    lines.push(i.toString(16).padStart(8, "0") + "  " + row.join(" "));
  }
  return lines.join("\n");
}

async function renderBody(response, contentType) {
  if (isJson(contentType)) {
    const messages = await response.json();
    return messages.map((m) => JSON.stringify(m, null, 2));
  }
  if (isText(contentType)) {
    const text = await response.text();
    return text ? [text] : [];
  }
  const bytes = new Uint8Array(await response.arrayBuffer());
  return bytes.length ? [hex(bytes)] : [];
}

// ---- the list of streams
async function listView(params) {
  const prefix = params.get("prefix") || "";
  const filter = el("input", { id: "filter", value: prefix, placeholder: "name prefix", "aria-label": "Filter by name prefix" });
  const rows = el("tbody");
  const more = el("button", { id: "more", hidden: "" }, "More");
  let cursor = null;
  // Typing starts a load per key: only the latest one's answer is shown.
  let generation = 0;
  async function load(reset) {
    const mine = ++generation;
    let url = "/v1/streams?limit=100&prefix=" + encodeURIComponent(filter.value);
    if (!reset && cursor) url += "&cursor=" + encodeURIComponent(cursor);
    try {
      const page = await (await call("GET", url)).json();
      if (mine !== generation) return;
      const found = page.streams.map((s) => el("tr", {},
        el("td", {}, el("a", { href: "#/stream/" + encodeURIComponent(s.name) }, s.name)),
        el("td", {}, s.content_type),
        el("td", { class: "optional" }, String(s.size_bytes)),
        el("td", { class: "optional" }, s.closed ? "closed" : (s.ttl_secs ? `ttl ${s.ttl_secs} s` : ""))));
      if (reset) rows.replaceChildren(...found);
      else rows.append(...found);
      cursor = page.next_cursor;
      more.hidden = !cursor;
      say(rows.children.length ? "" : "No streams here yet.");
    } catch (e) { if (mine === generation) say(e.message, true); }
  }
  filter.addEventListener("input", () => load(true));
  more.addEventListener("click", () => load(false));
  const name = el("input", { id: "new-name", placeholder: "new stream name", "aria-label": "New stream name", required: "" });
  const type = el("select", { id: "new-type", "aria-label": "Content type" },
    el("option", { value: "application/json" }, "application/json"),
    el("option", { value: "text/plain" }, "text/plain"),
    el("option", { value: "application/octet-stream" }, "application/octet-stream"));
  const create = el("form", { id: "create", onsubmit: async (event) => {
    event.preventDefault();
    try {
      await call("PUT", streamUrl(name.value), { headers: { "content-type": type.value } });
      location.hash = "#/stream/" + encodeURIComponent(name.value);
    } catch (e) { say(e.message, true); }
  } }, el("div", { class: "row" }, name, type, el("button", { type: "submit" }, "Create")));
  main.replaceChildren(
    el("h1", {}, "Streams"),
    el("section", {}, el("div", { class: "row" }, filter)),
    el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "Name"), el("th", {}, "Content type"),
      el("th", { class: "optional" }, "Bytes"), el("th", { class: "optional" }, ""))), rows),
    more,
    el("section", {}, el("h2", {}, "New stream"), create));
  await load(true);
}

// ---- one stream: history, live tail, append, fork, delete
async function streamView(name) {
  let info;
  try {
    info = await call("HEAD", streamUrl(name));
  } catch (e) { main.replaceChildren(el("h1", {}, name)); say(e.message, true); return; }
  const contentType = info.headers.get("content-type");
  const history = el("ul", { class: "messages", id: "history" });
  const live = el("ul", { class: "messages", id: "live" });
  const next = el("button", { id: "next-page" }, "Next page");
  let offset = "-1";
  async function page() {
    try {
      const response = await call("GET", streamUrl(name) + "?offset=" + encodeURIComponent(offset));
      const following = response.headers.get("stream-next-offset");
      const items = await renderBody(response, contentType);
      history.replaceChildren(...items.map(renderItem));
      if (!items.length) history.append(el("li", { class: "muted" }, "Nothing more."));
      next.disabled = following === offset;
      offset = following;
    } catch (e) { say(e.message, true); }
  }
  next.addEventListener("click", page);

  let source = null;
  let liveOffset = "now";
  let reopen = null;
  const toggle = el("button", { id: "live-toggle", "aria-pressed": "false" }, "Start live tail");
  function stopLive() {
    clearTimeout(reopen);
    if (source) { source.close(); source = null; }
  }
  // EventSource cannot send an Authorization header: with a token set,
  // the tail reads with a short-lived read token for this stream, minted
  // by the server, in the query string.
  async function liveUrl() {
    const url = streamUrl(name) + "?live=sse&offset=" + encodeURIComponent(liveOffset);
    if (!tokenInput.value) return url;
    const minted = await call("POST", "/_runnel/read-token?prefix=" + encodeURIComponent(name) + "&ttl_secs=900");
    return url + "&access_token=" + encodeURIComponent((await minted.json()).token);
  }
  // Opens the SSE read at `liveOffset`. EventSource would reconnect by
  // itself, but from the offset it first asked for (showing everything
  // again); this one reconnects from the last control event's offset.
  async function openLive() {
    let url;
    try {
      url = await liveUrl();
    } catch (e) {
      say("Live tail needs a read token: " + e.message, true);
      reopen = setTimeout(openLive, 5000);
      return;
    }
    if (toggle.getAttribute("aria-pressed") !== "true") return; // paused meanwhile
    source = new EventSource(url);
    source.addEventListener("open", () => say("Live tail running."));
    source.addEventListener("error", () => {
      if (!source) return;
      source.close();
      say("Live tail reconnecting…");
      reopen = setTimeout(openLive, 1000);
    });
    source.addEventListener("data", (event) => {
      const data = event.data;
      let items;
      if (isJson(contentType)) items = JSON.parse(data).map((m) => JSON.stringify(m, null, 2));
      else if (isText(contentType)) items = [data];
      else items = [hex(Uint8Array.from(atob(data), (c) => c.charCodeAt(0)))];
      for (const item of items) live.append(renderItem(item));
    });
    source.addEventListener("control", (event) => {
      const control = JSON.parse(event.data);
      if (control.streamNextOffset) liveOffset = control.streamNextOffset;
      if (control.streamClosed) {
        stopLive();
        toggle.disabled = true;
        say("The stream is closed.");
      }
    });
  }
  toggle.addEventListener("click", async () => {
    if (source) {
      stopLive();
      toggle.textContent = "Resume live tail";
      toggle.setAttribute("aria-pressed", "false");
      say("Live tail paused.");
      return;
    }
    if (liveOffset === "now") {
      // From the tail as of this click: nothing appended after it is missed
      // while the connection opens.
      try {
        liveOffset = (await call("HEAD", streamUrl(name))).headers.get("stream-next-offset");
      } catch (e) { say(e.message, true); return; }
    }
    toggle.textContent = "Pause live tail";
    toggle.setAttribute("aria-pressed", "true");
    openLive();
  });
  cleanup = stopLive;

  const message = el("textarea", { id: "message", "aria-label": "Message to append",
    placeholder: isJson(contentType) ? '{"text": "hello"}' : "text to append" });
  const append = el("form", { id: "append", onsubmit: async (event) => {
    event.preventDefault();
    try {
      await call("POST", streamUrl(name), { body: message.value, headers: { "content-type": contentType } });
      message.value = "";
      say("Appended.");
    } catch (e) { say(e.message, true); }
  } }, message, el("div", { class: "row" }, el("button", { type: "submit" }, "Append")));

  const fork = el("button", { id: "fork", onclick: async () => {
    const target = prompt("Name of the fork:");
    if (!target) return;
    try {
      await call("PUT", streamUrl(target), { headers: { "stream-forked-from": streamUrl(name), "content-type": contentType } });
      location.hash = "#/stream/" + encodeURIComponent(target);
    } catch (e) { say(e.message, true); }
  } }, "Fork");
  const remove = el("button", { id: "delete", class: "danger", onclick: async () => {
    if (!confirm(`Delete the stream ${name}? Its history goes with it.`)) return;
    try { await call("DELETE", streamUrl(name)); location.hash = "#/"; say(`Deleted ${name}.`); }
    catch (e) { say(e.message, true); }
  } }, "Delete");

  main.replaceChildren(
    el("h1", {}, name),
    el("p", { class: "muted" }, `${contentType} · next offset ${info.headers.get("stream-next-offset")}` +
      (info.headers.get("stream-closed") === "true" ? " · closed" : "")),
    el("div", { class: "row" }, fork, remove),
    el("section", {}, el("h2", {}, "Append"), append),
    el("section", {}, el("h2", {}, "Live"), el("div", { class: "row" }, toggle), live),
    el("section", {}, el("h2", {}, "History"), el("div", { class: "row" }, next), history));
  await page();
}

// ---- the cluster
async function clusterView() {
  const body = el("div");
  main.replaceChildren(el("h1", {}, "Cluster"), body);
  let last = null;
  async function refresh() {
    try {
      const status = await (await call("GET", "/_runnel/status")).json();
      const metrics = await (await call("GET", "/metrics")).text();
      const requests = metrics.split("\n").filter((l) => l.startsWith("runnel_http_requests_total"))
        .reduce((sum, l) => sum + Number(l.split(" ").pop()), 0);
      const now = Date.now();
      const rate = last ? ((requests - last.requests) * 1000 / (now - last.at)).toFixed(1) : "…";
      last = { requests, at: now };
      const nodes = status.nodes ? Object.entries(status.nodes).map(([id, addr]) => `${id}: ${addr}`).join(", ") : "one node";
      const groups = Array.isArray(status.groups) ? status.groups : [];
      body.replaceChildren(
        el("p", {}, `Mode: ${status.mode}` + (status.node_id ? ` · this is node ${status.node_id}` : "") + ` · nodes: ${nodes}`),
        el("p", { id: "throughput" }, `Requests/s on this node: ${rate}`),
        groups.length ? el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "Group"), el("th", {}, "Leader"),
          el("th", {}, "Term"), el("th", {}, "Applied"), el("th", {}, "Follower lag (entries)"))),
          el("tbody", {}, ...groups.map((g) => el("tr", {}, el("td", {}, String(g.group)),
            el("td", {}, g.leader == null ? "none" : `node ${g.leader}`), el("td", {}, String(g.term)),
            el("td", {}, String(g.last_applied_index ?? "-")),
            el("td", {}, (g.follower_lag || []).map(([node, lag]) => `node ${node}: ${lag ?? "?"}`).join(", ") || "-")))))
          : el("p", { class: "muted" }, `${status.groups} group(s), log at byte ${status.log_position}`));
      say("");
    } catch (e) { say(e.message, true); }
  }
  await refresh();
  const timer = setInterval(refresh, 2000);
  cleanup = () => clearInterval(timer);
}

async function route() {
  cleanup();
  cleanup = () => {};
  say("");
  const [path, query] = location.hash.slice(1).split("?");
  const params = new URLSearchParams(query || "");
  if (path.startsWith("/stream/")) await streamView(decodeURIComponent(path.slice(8)));
  else if (path === "/cluster") await clusterView();
  else await listView(params);
  main.focus();
}

window.addEventListener("hashchange", route);
route();
