# The ledger's content hash h3c-sum128-v1 (docs/contract.md section 9), written from the formula, independent of h3c's
# C++. As a script: prints the hash of each file given.
import sys

M = (1 << 64) - 1


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)


def content_hash(data):
    n, a, b = len(data), 0, 0
    for i in range((n + 7) // 8):
        w = int.from_bytes(data[8 * i:8 * i + 8].ljust(8, b"\0"), "little")
        k = mix(i)
        a = (a + mix(w ^ k)) & M
        b = (b + mix(w ^ (((k << 32) | (k >> 32)) & M) ^ 0xD6E8FEB86659FD93)) & M
    return "%016x%016x" % (mix(a ^ mix(n)), mix(b ^ mix(~n & M)))


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(content_hash(open(path, "rb").read()))
