"""Peak memory of one process fed a hostile file or hostile server answers.

Usage: python bench/hostile_memory.py [--pt-mb 600] [--line-mb 200] [--answer-mb 48] [--concurrency 16]
                                      [--code ROOT] [--only pt line answers]

Built in a temporary folder:

- ``bomb.pt``: a slime dump (``torch.save``'s zip, its ``data.pkl`` deflated) of three samples, the second
  with a ``response`` string of ``--pt-mb`` MB of one letter: under a megabyte on disk;
- ``line.jsonl``: a valid episode record whose first message holds ``--line-mb`` MB, between two small ones;
- a server (its own process) answering each POST with ``--answer-mb`` MB of JSON whitespace, slowly, to
  ``--concurrency`` requests at once.

Each is read by ``rollscope import`` (or the HTTP client) in a child process; the peak RSS of that child
(``os.wait4``), its time and its last line of stderr are printed. ``--code`` runs another checkout's
engine (an earlier commit unpacked with ``git archive``) for a before and after.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures_formats import write_long_line, write_zip_bomb  # noqa: E402
from tests.synthetic import synthetic_episode  # noqa: E402

SERVER = r"""
import asyncio, sys
MB, PORT = int(sys.argv[1]), int(sys.argv[2])
async def handle(reader, writer):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        n = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
        await reader.readexactly(n)
        size = MB * 10**6 + 2
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % size)
        for _ in range(MB):
            writer.write(b" " * 10**6)
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(b"{}")
        await writer.drain()
    except Exception:
        pass
    writer.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", PORT)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()
asyncio.run(main())
"""

CLIENT = r"""
import asyncio, sys
from engine.backends.http import JSONClient, RetryPolicy
url, n = sys.argv[1], int(sys.argv[2])
client = JSONClient("bench", RetryPolicy(timeout=120, retries=0))
async def main():
    out = await asyncio.gather(*(client.post(url, {"i": i}) for i in range(n)), return_exceptions=True)
    ok = sum(not isinstance(x, BaseException) for x in out)
    failed = [x for x in out if isinstance(x, BaseException)]
    print(f"{ok} answered, {len(failed)} refused" + (f": {failed[0]}" if failed else ""), file=sys.stderr)
asyncio.run(main())
"""


def measure(argv: list[str], code: Path) -> tuple[float, float, int, str]:
    """(peak RSS in MB, seconds, exit status, last stderr line) of one child."""
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    err = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=err)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - t0
    err.seek(0)
    lines = [line for line in err.read().decode("utf-8", "replace").splitlines() if line.strip()]
    return usage.ru_maxrss / 1024, seconds, proc.returncode, (lines[-1] if lines else "")[:160]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pt-mb", type=int, default=600)
    ap.add_argument("--line-mb", type=int, default=200)
    ap.add_argument("--answer-mb", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose engine is measured")
    ap.add_argument("--only", nargs="*", default=["pt", "line", "answers"], choices=["pt", "line", "answers"])
    ap.add_argument("--dir", help="where the temporary folder goes")
    a = ap.parse_args()
    code = a.code.resolve()
    py = sys.executable
    rows = []
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        t = Path(tmp)
        if "pt" in a.only:
            write_zip_bomb(t / "bomb.pt", a.pt_mb)
            argv = [py, "-m", "engine.cli", "import", str(t / "bomb.pt"), "--format", "slime", "--db",
                    str(t / "pt.db"), "--quiet"]
            rows.append((f"zip bomb .pt ({(t / 'bomb.pt').stat().st_size / 1e6:.1f} MB -> {a.pt_mb} MB response)",
                         *measure(argv, code)))
        if "line" in a.only:
            write_long_line(t / "line.jsonl", a.line_mb, [synthetic_episode(i).to_dict() for i in range(3)])
            argv = [py, "-m", "engine.cli", "import", str(t / "line.jsonl"), "--format", "jsonl", "--db",
                    str(t / "line.db"), "--quiet"]
            rows.append((f"JSONL with a {a.line_mb} MB line", *measure(argv, code)))
        if "answers" in a.only:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            server = subprocess.Popen([py, "-c", SERVER, str(a.answer_mb), str(port)], stdout=subprocess.PIPE,
                                      text=True)
            try:
                assert server.stdout is not None and server.stdout.readline().strip() == "ready"
                argv = [py, "-c", CLIENT, f"http://127.0.0.1:{port}/generate", str(a.concurrency)]
                rows.append((f"{a.concurrency} answers of {a.answer_mb} MB at once", *measure(argv, code)))
            finally:
                server.terminate()
                server.wait(10)
    print(f"engine: {code}")
    for name, rss, seconds, rc, last in rows:
        print(f"{name:48} peak RSS {rss:8.0f} MB  {seconds:6.1f} s  exit {rc}  {last}")


if __name__ == "__main__":
    main()
