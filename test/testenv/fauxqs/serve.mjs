// Serves the fauxqs SNS/SQS emulator on 127.0.0.1 only, at the port given
// as the first argument, for the tests (test/testenv/fauxqs.go). State is
// in memory; the test creates its topics, queues and subscriptions.
import { buildApp } from "fauxqs";

const port = Number(process.argv[2]);
const app = buildApp({ logger: false });
await app.listen({ port, host: "127.0.0.1" });
for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => app.close().then(() => process.exit(0)));
}
