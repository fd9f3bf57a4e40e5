#!/usr/bin/env python3
"""Instructions inside redis-server per check: tollgate's token bucket one
call per check and coalesced (batches of several sizes), and throttle-kit's
script, each on keys present (written before) and absent (never written).

    python3 scripts/redis_instructions.py peer/redis_compare/target/release/redis_compare

The scripts are the very ones the given `redis_compare` build sends: it
runs briefly against a plain redis-server watched by MONITOR, and the
scripts are read off what it sent. They then run, one call at a time (as
`redis-cli -r N EVALSHA …` does), against a redis-server under callgrind;
each case's count is the least of three repetitions (the Lua heap
collected in full before each), less `serverCron` (Redis's timer, whose
expiry sweeps run by the clock, not per call), divided by the checks.
Needs redis-server, redis-cli, valgrind (callgrind_control,
callgrind_annotate). Environment: N (checks per case, default 1280),
SIZES (batch sizes, default 8,32,64). Each size also runs as one client
making that many requests of cost 1 in one call (a hot client's coalesced
checks).
"""
import glob, os, re, socket, subprocess, sys, tempfile, threading, time


class R:
    """A RESP client: one command at a time, or a pipeline."""

    def __init__(self, port):
        for _ in range(200):
            try:
                self.s = socket.create_connection(('127.0.0.1', port))
                break
            except OSError:
                time.sleep(0.1)
        self.f = self.s.makefile('rb')

    @staticmethod
    def enc(args):
        out = [b'*%d\r\n' % len(args)]
        for a in args:
            a = str(a).encode() if not isinstance(a, bytes) else a
            out.append(b'$%d\r\n%s\r\n' % (len(a), a))
        return b''.join(out)

    def read(self):
        line = self.f.readline()[:-2]
        t, rest = line[:1], line[1:]
        if t == b'+':
            return rest.decode()
        if t == b'-':
            return Exception(rest.decode())
        if t == b':':
            return int(rest)
        if t == b'$':
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if t == b'*':
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ValueError(line)

    def call(self, *args):
        self.s.sendall(self.enc(args))
        return self.read()

    def pipe(self, cmds, depth):
        out = []
        for i in range(0, len(cmds), depth):
            chunk = cmds[i:i + depth]
            self.s.sendall(b''.join(self.enc(c) for c in chunk))
            out.extend(self.read() for _ in chunk)
        return out


def spare_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def server(port, *prefix):
    return subprocess.Popen([*prefix, 'redis-server', '--port', str(port), '--bind', '127.0.0.1',
                             '--save', '', '--appendonly', 'no'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def unquote(s):
    s = re.sub(r'\\x([0-9a-f]{2})', lambda m: chr(int(m.group(1), 16)), s)
    return re.sub(r'\\(.)', lambda m: {'n': '\n', 'r': '\r', 't': '\t'}.get(m.group(1), m.group(1)), s)


def capture(binary):
    """The scripts `binary` sends: (one call per check, batch, throttle-kit)."""
    port = spare_port()
    srv = server(port)
    R(port).call('PING')
    mon = subprocess.Popen(['redis-cli', '-p', str(port), 'monitor'], stdout=subprocess.PIPE, text=True,
                           stderr=subprocess.DEVNULL,
                           errors='surrogateescape')
    # Drained as it comes (a full pipe would hold the monitor back), up to
    # a marker sent after the runs: the server is stopped only once the
    # monitor has passed on everything before it.
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(mon.stdout.readline, '')), daemon=True)
    reader.start()
    time.sleep(0.3)
    env = dict(os.environ, REDIS_URL=f'redis://127.0.0.1:{port}/')
    for lib, tasks in [('tollgate', '1'), ('coalesced', '64'), ('throttle-kit', '1')]:
        subprocess.run([binary, '--only', lib, '--tasks', tasks, '--secs', '0.1'], env=env,
                       stdout=subprocess.DEVNULL, check=True)
    R(port).call('ECHO', 'redis-instructions-end')
    for _ in range(600):
        if any('redis-instructions-end' in line for line in lines[-5:]):
            break
        time.sleep(0.1)
    srv.terminate(); srv.wait()
    mon.wait(); reader.join()
    out = ''.join(lines)
    bodies = []
    for line in out.splitlines():
        if '"EVAL" ' in line or '"SCRIPT" "LOAD" ' in line:
            args = [unquote(m.group(1)) for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', line.split('] ', 1)[1])]
            bodies.append(args[1] if args[0] == 'EVAL' else args[2])
    check = next(b for b in bodies if 'local cost, HEAD' in b or 'local HEAD, cost' in b)
    batch = next(b for b in bodies if 'local function read' in b)
    tk = next(b for b in bodies if 'GCRA' in b)
    return check, batch, tk


def main():
    check, batch, tk = capture(sys.argv[1])
    n_checks = int(os.environ.get('N', 1280))
    sizes = [int(x) for x in os.environ.get('SIZES', '8,32,64').split(',')]
    port = spare_port()
    out = tempfile.mkdtemp()
    srv = server(port, 'valgrind', '--tool=callgrind', f'--callgrind-out-file={out}/cg.%p')
    r = R(port)
    while r.call('PING') != 'PONG':
        time.sleep(0.3)
    shas = [r.call('SCRIPT', 'LOAD', body).decode() for body in (check, batch, tk)]
    short = '-sc' in batch
    # What each build reads: a check's cost left out where it is 1, and a
    # batch of clients of one request of cost 1 each sent without an
    # argument per client.
    bare = 'local HEAD, cost' in check
    same = 'if S == 0 then' in batch
    # A client's many requests of cost 1 sent as one argument.
    hot = 'local hot' in batch

    def count():
        subprocess.run(['callgrind_control', '-d', str(srv.pid)], capture_output=True)
        time.sleep(0.5)
        f = max(glob.glob(f'{out}/cg.{srv.pid}.*'), key=os.path.getmtime)
        a = subprocess.run(['callgrind_annotate', '--inclusive=yes', f], capture_output=True, text=True).stdout
        total = cron = 0
        for line in a.splitlines():
            if 'PROGRAM TOTALS' in line:
                total = int(line.split()[0].replace(',', ''))
            if ':serverCron [' in line and not cron:
                cron = int(line.split()[0].replace(',', ''))
        return total - cron

    def measure(label, make, per):
        r.pipe(make('w'), 50)  # keys present: each written once before
        got = []
        for rep in range(3):
            cmds = make(f'm{rep}')
            r.call('EVAL', "collectgarbage('collect') return 1", 0)
            subprocess.run(['callgrind_control', '-z', str(srv.pid)], capture_output=True)
            time.sleep(0.3)
            replies = r.pipe(cmds, 1)
            got.append(count())
            bad = [x for x in replies if isinstance(x, Exception)]
            assert not bad, bad[:2]
        got.sort()
        print(f'| {label} | {got[0] / per / 1000:.1f} k | {got[1] / per / 1000:.1f} k |', flush=True)

    print('| case | instructions per check (least of 3) | median |')
    print('|---|---:|---:|')
    for present in (True, False):
        # Present: a bucket of 1 000 000 a second per 1 s (each admission
        # moves its TAT a second on: its key lives). Absent: the settings
        # of redis_compare (a million an hour), every key new.
        a = 1_000_000 if present else 3600
        head = f'tb:{a}:1000000|0:0|0123456789abcdef.'
        case = 'present' if present else 'absent'

        def key(phase, i, cycle):
            return f'{case}:{i % cycle}' if present else f'{case}:{phase}:{i}'

        measure(f'key {case}, one call per check',
                lambda ph: [['EVALSHA', shas[0], 1, key(ph, i, 100), a, 1_000_000, head, i] if bare else
                            ['EVALSHA', shas[0], 1, key(ph, i, 100), a, 1_000_000, 1, head, i]
                            for i in range(n_checks)], n_checks)
        for size in sizes:
            calls = max(1, n_checks // size)

            def make(ph, size=size, calls=calls):
                cmds = []
                for j in range(calls):
                    keys = [key(ph, f'{size}.{j * size + i}', 10 ** 9) if not present
                            else key(ph, j * size + i, 1000) for i in range(size)]
                    # Each client one request of cost 1, as the limiter
                    # sends it: `-1` alone where the script reads that
                    # form, else `1024 + 1` and the cost.
                    per_key = [x for _ in keys for x in ((-1,) if short else (1024 + 1, 1))]
                    if same:
                        cmds.append(['EVALSHA', shas[1], size, *keys, 0, a, 1_000_000, head, j])
                    else:
                        cmds.append(['EVALSHA', shas[1], size, *keys, 1, a, 1_000_000, head, j, *per_key])
                return cmds
            measure(f'key {case}, batches of {size}', make, calls * size)
        for size in sizes:
            calls = max(1, n_checks // size)

            def make_hot(ph, size=size, calls=calls):
                # One client, `size` requests of cost 1 in each call (a hot
                # client's coalesced checks): `-(size × 1024 + 1)` alone
                # where the script reads that form, else `size × 1024 + 1`
                # and each cost.
                per = [-(size * 1024 + 1)] if hot else [size * 1024 + 1, *([1] * size)]
                return [['EVALSHA', shas[1], 1, key(ph, f'hot.{j}', 1) if not present else f'{case}:hot',
                         1, a, 1_000_000, head, j, *per] for j in range(calls)]
            measure(f'key {case}, one client, batches of {size}', make_hot, calls * size)
        now = int(time.time() * 1000)
        measure(f'key {case}, throttle-kit, one call per check',
                lambda ph: [['EVALSHA', shas[2], 1, 'tk:' + key(ph, i, 100), 3, 1_000_000, 1, now + i, 3_000_000]
                            for i in range(n_checks)], n_checks)
    srv.terminate(); srv.wait()


if __name__ == '__main__':
    main()
