// Drives the console at CONSOLE_TEST_URL in headless Chromium: creates a
// stream, appends, sees the message arrive live, pauses and resumes the
// tail, pages history, forks and deletes, checks that markup appended to
// a stream stays inert text, and visits the cluster page and the list on
// a phone-sized screen; against CONSOLE_AUTH_URL (a server with access
// control), live-tails with the token CONSOLE_AUTH_TOKEN. Screenshots go
// to SCREENSHOT_DIR.
import assert from "node:assert/strict";
import puppeteer from "puppeteer-core";

const base = process.env.CONSOLE_TEST_URL;
const shots = process.env.SCREENSHOT_DIR;
assert.ok(base && shots && process.env.CONSOLE_AUTH_URL && process.env.CONSOLE_AUTH_TOKEN,
  "CONSOLE_TEST_URL, CONSOLE_AUTH_URL, CONSOLE_AUTH_TOKEN and SCREENSHOT_DIR are needed");

const api = (method, name, body, contentType) =>
  fetch(`${base}/v1/stream/${name.split("/").map(encodeURIComponent).join("/")}`, {
    method,
    body,
    headers: contentType ? { "content-type": contentType } : {},
  });
const step = (text) => console.log(`console: ${text}`);

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const errors = [];
const page = await browser.newPage();
try {
  await page.setViewport({ width: 1100, height: 800 });
  page.on("pageerror", (e) => errors.push(e.message));
  let promptAnswer = "";
  page.on("dialog", (dialog) =>
    dialog.type() === "prompt" ? dialog.accept(promptAnswer) : dialog.accept());
  const texts = (selector) =>
    page.$$eval(selector, (nodes) => nodes.map((n) => n.textContent));
  const waitForText = (selector, text) =>
    page.waitForFunction(
      (s, t) => [...document.querySelectorAll(s)].some((n) => n.textContent.includes(t)),
      { timeout: 10_000 },
      selector,
      text,
    );

  step("create a JSON stream from the list page");
  await page.goto(`${base}/console`);
  await page.waitForSelector("#create");
  await page.type("#new-name", "e2e/chat");
  await page.select("#new-type", "application/json");
  await page.click("#create button[type=submit]");
  await page.waitForSelector("#live-toggle");
  assert.equal(await page.evaluate(() => decodeURIComponent(location.hash)), "#/stream/e2e/chat");

  step("append and see it arrive live");
  await page.click("#live-toggle");
  await waitForText("#status", "Live tail running");
  await page.type("#message", '{"text":"hello from the console","n":1}');
  await page.click("#append button[type=submit]");
  await waitForText("#live li pre", "hello from the console");
  const shown = (await texts("#live li pre")).find((t) => t.includes("hello"));
  assert.ok(shown.includes('\n  "text": "hello from the console"'), `pretty-printed: ${shown}`);
  await page.screenshot({ path: `${shots}/stream-live.png`, fullPage: true });

  step("pause and resume the live tail");
  await page.click("#live-toggle");
  await waitForText("#status", "paused");
  assert.equal((await api("POST", "e2e/chat", '{"text":"while paused"}', "application/json")).status, 204);
  await new Promise((r) => setTimeout(r, 500));
  assert.ok(!(await texts("#live li pre")).some((t) => t.includes("while paused")));
  await page.click("#live-toggle");
  await waitForText("#live li pre", "while paused");

  step("page through history");
  for (let i = 0; i < 3; i++) {
    await api("POST", "e2e/chat", JSON.stringify({ text: `older ${i}` }), "application/json");
  }
  await page.reload();
  await waitForText("#history li pre", "older 2");
  const history = await texts("#history li pre");
  assert.equal(history.length, 5, history.join(" | "));
  await page.click("#next-page");
  await waitForText("#history li", "Nothing more");

  step("fork the stream");
  promptAnswer = "e2e/chat-fork";
  await page.click("#fork");
  await page.waitForFunction(() => decodeURIComponent(location.hash) === "#/stream/e2e/chat-fork");
  await waitForText("#history li pre", "older 2");

  step("markup in a stream stays text");
  const markup = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"><b>bold</b>';
  assert.equal((await api("PUT", "e2e/hostile", markup, "text/plain")).status, 201);
  await page.goto(`${base}/console#/stream/e2e%2Fhostile`);
  await waitForText("#history li pre", "<script>");
  assert.deepEqual(await texts("#history li pre"), [markup]);
  await page.click("#live-toggle");
  await waitForText("#status", "Live tail running");
  await api("POST", "e2e/hostile", markup, "text/plain");
  await waitForText("#live li pre", "onerror");
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  assert.equal(await page.$$eval("main img, main b, main script", (n) => n.length), 0);
  await page.screenshot({ path: `${shots}/hostile.png`, fullPage: true });

  step("delete with confirmation");
  await page.click("#delete");
  await page.waitForFunction(() => location.hash === "#/");
  assert.equal((await api("HEAD", "e2e/hostile")).status, 404);

  step("list and filter");
  await waitForText("tbody td a", "e2e/chat-fork");
  assert.deepEqual(await texts("tbody td a"), ["e2e/chat", "e2e/chat-fork"]);
  await page.type("#filter", "e2e/chat-");
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 1);
  await page.screenshot({ path: `${shots}/list.png`, fullPage: true });

  step("keyboard: the filter and the links are reachable by Tab");
  await page.goto(`${base}/console`);
  await page.waitForSelector("tbody td a");
  const reached = new Set();
  for (let i = 0; i < 12; i++) {
    await page.keyboard.press("Tab");
    reached.add(await page.evaluate(() => document.activeElement.id || document.activeElement.tagName));
  }
  assert.ok(reached.has("filter") && reached.has("A"), [...reached].join(","));

  step("cluster page");
  await page.goto(`${base}/console#/cluster`);
  await waitForText("main p", "Mode: single");
  await page.screenshot({ path: `${shots}/cluster.png`, fullPage: true });

  step("a phone-sized screen");
  await page.setViewport({ width: 390, height: 844, isMobile: true });
  await page.goto(`${base}/console`);
  await page.waitForSelector("tbody td a");
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1);
  assert.equal(overflow, false, "no sideways scrolling on a phone");
  await page.screenshot({ path: `${shots}/phone.png`, fullPage: true });

  step("with access control: the token reads the list, and the live tail reads with a minted read token");
  const authBase = process.env.CONSOLE_AUTH_URL;
  const token = process.env.CONSOLE_AUTH_TOKEN;
  const authed = (method, name, body) =>
    fetch(`${authBase}/v1/stream/${name}`, {
      method,
      body,
      headers: { "content-type": "text/plain", authorization: `Bearer ${token}` },
    });
  assert.equal((await authed("PUT", "private")).status, 201);
  await page.setViewport({ width: 1100, height: 800 });
  await page.goto(`${authBase}/console`);
  await waitForText("#status", "401");
  await page.type("#token", token);
  await page.keyboard.press("Tab");
  await page.goto(`${authBase}/console#/stream/private`);
  await page.waitForSelector("#live-toggle");
  await page.click("#live-toggle");
  await waitForText("#status", "Live tail running");
  assert.equal((await authed("POST", "private", "for token holders")).status, 204);
  await waitForText("#live li pre", "for token holders");

  assert.deepEqual(errors, [], "no script errors");
  step("all checks passed");
} catch (e) {
  await page.screenshot({ path: `${shots}/failure.png`, fullPage: true }).catch(() => {});
  console.error(`console: failed at ${await page.evaluate(() => location.href).catch(() => "?")}`);
  console.error(`console: page text: ${await page.evaluate(() => document.body.innerText).catch(() => "?")}`);
  throw e;
} finally {
  await browser.close();
}
