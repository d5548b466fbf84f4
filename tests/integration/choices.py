"""choices.py -- what the n > 1 tests (n_fork.sh, tests/gpu/n_fork_cuda.sh) need of the server's choices:
the seed a choice samples with (server.c: choice 0 the request's seed, choice i > 0 mix64(seed + i), as a
signed 64-bit request seed) and a /metrics sample."""
import urllib.request

M64 = (1 << 64) - 1


def mix64(x):
    """server.c's mix64 (splitmix64's finaliser)."""
    x = (x + 0x9e3779b97f4a7c15) & M64
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M64
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


def choice_seed(seed, i):
    """The seed of choice i of a request with seed `seed`, as a request with n = 1 would give it."""
    s = seed if i == 0 else mix64(seed + i)
    return s - (1 << 64) if s >= 1 << 63 else s


def metric(url, name):
    """The value of the unlabelled sample `name` on url's /metrics."""
    for line in urllib.request.urlopen(url + "/metrics", timeout=30).read().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)
