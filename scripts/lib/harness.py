"""What scripts/torture.py and scripts/soak.py share: a wsbridged and a wsbridge-testserver on
loopback, local clients, and readings of a process from /proc."""

import asyncio
import json
import os
import random
import resource
import shutil
import socket
import sys
import subprocess
import threading
import time

MiB = 1 << 20


def proc_status(pid, field):
    """A number from /proc/PID/status (`VmRSS` in KiB, `Threads`), 0 when absent."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_kib(pid):
    return proc_status(pid, "VmRSS")


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Generator:
    """wsbridge-testserver: the upstream, driven through its stdin commands. A thread reads what
    it reports; `on_line` (if given) sees every line first and may keep one from the log that
    `wait_for` searches by returning True (the soak counts its many `message` lines that way)."""

    def __init__(self, bindir, on_line=None):
        self.proc = subprocess.Popen(
            [f"{bindir}/wsbridge-testserver", "--port", "0", "--no-echo", "--max-frame", str(4 * MiB)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        line = self.proc.stdout.readline().split()
        assert line[0] == "listening", line
        self.port = int(line[1])
        self.on_line = on_line
        self.lines = []
        self.cursor = 0
        self.changed = threading.Condition()
        threading.Thread(target=self._follow, daemon=True).start()

    def _follow(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if self.on_line and self.on_line(line):
                continue
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    def command(self, text):
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def wait_for(self, prefix, timeout=120):
        """The next line, after the last one found, that starts with `prefix`."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for i in range(self.cursor, len(self.lines)):
                    if self.lines[i].startswith(prefix):
                        self.cursor = i + 1
                        return self.lines[i]
                self.cursor = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(f"generator never said {prefix!r}")
                self.changed.wait(left)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Daemon:
    def __init__(self, bindir, workdir, port, extra="", launcher=(), env=None):
        self.socket = os.path.join(workdir, f"d{random.randrange(1 << 30)}.sock")
        config = os.path.join(workdir, "wsbridged.toml")
        with open(config, "w") as f:
            f.write(f'[upstream]\nurl = "ws://127.0.0.1:{port}/"\ncompression = false\n'
                    f'[reachability]\nenabled = false\n[local]\nsocket = "{self.socket}"\n{extra}\n'
                    f'[log]\nlevel = "notice"\n')
        self.log = open(os.path.join(workdir, "wsbridged.log"), "a")
        self.proc = subprocess.Popen([*launcher, f"{bindir}/wsbridged", "--config", config],
                                     stdout=self.log, stderr=self.log, env=env)
        deadline = time.monotonic() + 30
        while not self.listening():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("wsbridged did not start: see wsbridged.log")
            time.sleep(0.01)
        self.pid = self.proc.pid

    def listening(self):
        """The path appears at bind(2), a moment before listen(2): a connect tells."""
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(self.socket)
            return True
        except OSError:
            return False
        finally:
            probe.close()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


async def open_client(path, read_hello=True):
    reader, writer = await asyncio.open_unix_connection(path, limit=64 * MiB)
    if read_hello:
        hello = json.loads(await reader.readline())
        assert hello["type"] in ("hello", "reply"), hello
    return reader, writer


class Bystander:
    """A subscriber that reads everything: counts messages, checks seq order (a jump that no
    `dropped` line announced is `out_of_order`), records latency unless `latency` is False."""

    def __init__(self, latency=True):
        self.keep_latency = latency
        self.count = 0
        self.last_seq = None
        self.out_of_order = 0
        self.dropped = 0
        self.latencies = []
        self.task = None

    async def run(self, path):
        reader, self.writer = await open_client(path)
        while True:
            line = await reader.readline()
            if not line:
                return
            now_ms = time.time() * 1000
            msg = json.loads(line)
            if msg["type"] == "message":
                self.count += 1
                if self.last_seq is not None and msg["seq"] != self.last_seq + 1:
                    self.out_of_order += 1
                self.last_seq = msg["seq"]
                if self.keep_latency:
                    self.latencies.append(now_ms - msg["ts"])
            elif msg["type"] == "dropped":
                self.dropped += msg["count"]
                self.last_seq = msg["to"]


async def ticks(stop, seconds):
    """Yields every `seconds` until `stop` is set (at once when it is)."""
    while True:
        try:
            await asyncio.wait_for(stop.wait(), seconds)
            return
        except asyncio.TimeoutError:
            yield


def finish(name, payload, problems, json_path, workdir, success):
    """Writes the figures (`--json`), removes the work directory, prints the verdict; the exit
    status."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump({**payload, "problems": problems}, f, indent=1)
    shutil.rmtree(workdir, ignore_errors=True)
    if problems:
        print(f"{name}: FAILED\n- " + "\n- ".join(problems))
        return 1
    print(f"{name}: {success}")
    return 0


def run(main):
    """Runs an asyncio main with room for many clients' descriptors, and exits with its status."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    sys.exit(asyncio.run(main()))
