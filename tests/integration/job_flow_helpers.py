"""The app the delayed-job flow tests load: a debounced job, and a low-priority one
that records its runs in order (each may take ``pause`` seconds)."""

FLOW = """
import asyncio
import msgspec
from datetime import timedelta
from sluice.app import App, JobContext, Tx

app = App("flow")
app.migration(1, "runs", "CREATE TABLE job_runs (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
              " job TEXT NOT NULL, key TEXT NOT NULL, note TEXT NOT NULL)")


class Note(msgspec.Struct, frozen=True):
    note: str
    pause: float = 0.0  # how long the run takes


@app.job("reindex", payload=Note, debounce=timedelta(seconds=2), max_wait=timedelta(seconds=4))
async def reindex(job: Note, tx: Tx, ctx: JobContext) -> None:
    await tx.execute("INSERT INTO job_runs (job, key, note) VALUES (?, ?, ?)",
                     (ctx.job, ctx.key, job.note))


@app.job("report", payload=Note, priority=0)
async def report(job: Note, tx: Tx, ctx: JobContext) -> None:
    await asyncio.sleep(job.pause)
    await tx.execute("INSERT INTO job_runs (job, key, note) VALUES (?, ?, ?)",
                     (ctx.job, ctx.key, job.note))
"""
