// Runs the Durable Streams server conformance suite against the server at
// CONFORMANCE_TEST_URL (scripts/conformance.sh starts one and sets it).
import { runConformanceTests } from "@durable-streams/server-conformance-tests"
import { Agent, setGlobalDispatcher } from "undici"

// CONFORMANCE_HTTP2=1: fetch negotiates HTTP/2 (over TLS, through ALPN).
if (process.env.CONFORMANCE_HTTP2 === "1") {
  setGlobalDispatcher(new Agent({ allowH2: true }))
}

const baseUrl = process.env.CONFORMANCE_TEST_URL
if (!baseUrl) throw new Error("set CONFORMANCE_TEST_URL to the server under test")

runConformanceTests({
  baseUrl,
  longPollTimeoutMs: Number(process.env.CONFORMANCE_LONG_POLL_TIMEOUT_MS ?? 500),
  subscriptions: process.env.CONFORMANCE_SUBSCRIPTIONS === "1",
})
