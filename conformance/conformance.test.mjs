// Runs the Durable Streams server conformance suite against the server at
// CONFORMANCE_TEST_URL (scripts/conformance.sh starts one and sets it).
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.CONFORMANCE_TEST_URL
if (!baseUrl) throw new Error("set CONFORMANCE_TEST_URL to the server under test")

runConformanceTests({
  baseUrl,
  longPollTimeoutMs: Number(process.env.CONFORMANCE_LONG_POLL_TIMEOUT_MS ?? 500),
  subscriptions: process.env.CONFORMANCE_SUBSCRIPTIONS === "1",
})
