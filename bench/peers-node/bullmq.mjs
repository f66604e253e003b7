// BullMQ's side of bench/peers.py: a no-op worker, or a producer of N no-op jobs.
//   node bullmq.mjs worker CONCURRENCY   count file $BENCH_COUNTS/<pid> as counter.py writes it
//   node bullmq.mjs produce N            prints {"start": s, "end": s} (wall times, seconds)
import { openSync, writeSync } from "node:fs";
import { Queue, Worker } from "bullmq";
import { Redis } from "ioredis";

const url = process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379";
// BullMQ 6 under ESM takes a constructed client; workers need maxRetriesPerRequest: null.
const connection = () => new Redis(url, { maxRetriesPerRequest: null });
const [mode, arg] = process.argv.slice(2);

if (mode === "worker") {
  const fd = openSync(`${process.env.BENCH_COUNTS}/${process.pid}`, "w+");
  const slot = Buffer.alloc(24);
  let count = 0;
  let last = 0;
  let first = 0;
  let written = -1;
  // Writing the file per job would be a system call per job: flush every 5 ms instead.
  const flush = () => {
    if (written === count) return;
    slot.writeBigUInt64LE(BigInt(count), 0);
    slot.writeDoubleLE(last, 8);
    slot.writeDoubleLE(first, 16);
    writeSync(fd, slot, 0, 24, 0);
    written = count;
  };
  setInterval(flush, 5);
  const worker = new Worker(
    "bench",
    async () => {
      count += 1;
      last = Date.now() / 1000;
      if (count === 1) first = last;
    },
    { connection: connection(), concurrency: Number(arg ?? 10) },
  );
  const stop = async () => {
    await worker.close();
    flush();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
} else if (mode === "produce") {
  const n = Number(arg);
  const client = connection();
  const queue = new Queue("bench", { connection: client });
  await queue.waitUntilReady();
  const start = Date.now() / 1000;
  for (let i = 0; i < n; i += 1000) {
    const size = Math.min(1000, n - i);
    await queue.addBulk(Array.from({ length: size }, () => ({ name: "noop", data: {} })));
  }
  const end = Date.now() / 1000;
  await queue.close();
  await client.quit(); // a client we constructed is ours to close
  console.log(JSON.stringify({ start, end }));
} else {
  console.error("usage: node bullmq.mjs worker [CONCURRENCY] | produce N");
  process.exit(2);
}
