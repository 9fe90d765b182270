#!/usr/bin/env python3
"""Plays a client that must not join a dpgossip run: bad_client.py CASE PORT [LIMIT_S].

Speaks the wire format of runtime/net/frame.h and auth.h (wire version 3) to a peer listening on
127.0.0.1:PORT, then waits (at most LIMIT_S seconds, default 20) for that peer to close the
connection. Prints "CASE 127.0.0.1:LOCALPORT closed after S s" and exits 0 when it was closed,
1 when it was not. CASE is one of:

  wrong-secret  claims rank 1 and answers the challenge with an HMAC under another secret
  wrong-rank    claims rank 0 (the listener's own) and then rank 99 (outside the world)
  bad-length    sends a hello frame whose header says 2^40 bytes
  silent        connects and says nothing
"""
import hashlib
import hmac
import os
import socket
import struct
import sys
import time
import zlib

VERSION = 3
HELLO, CHALLENGE, PROOF = 5, 6, 7


def header(kind, length):
    b = b"DPGM" + struct.pack("<HHIIQQI", VERSION, kind, 0, 0, 0, length, 0)
    return b + struct.pack("<I", zlib.crc32(b))


def hello(rank, world=3, config_hash=0):
    return b"DPGH" + struct.pack("<HHIIQQ", VERSION, 0, rank, world, config_hash, 0)


def challenge(nonce):
    return struct.pack("<II", 1, 0) + nonce  # mode 1: HMAC-SHA256 with a cluster secret


def opening(rank, nonce):
    h, c = hello(rank), challenge(nonce)
    return header(HELLO, len(h)) + h + header(CHALLENGE, len(c)) + c


def read_exactly(sock, n, until):
    out = b""
    while len(out) < n:
        sock.settimeout(max(0.01, until - time.monotonic()))
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed after %d of %d bytes" % (len(out), n))
        out += chunk
    return out


def closed(sock, until):
    """True when the other end closes (end of stream or reset) before `until`."""
    while time.monotonic() < until:
        sock.settimeout(max(0.01, until - time.monotonic()))
        try:
            if not sock.recv(4096):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
    return False


def connect(port, until):
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=1)
        except OSError:
            if time.monotonic() > until:
                raise
            time.sleep(0.05)


def play(case, port, limit):
    until = time.monotonic() + limit
    sock = connect(port, until)
    start = time.monotonic()
    me = "%s:%d" % sock.getsockname()
    if case == "wrong-secret":
        nonce = os.urandom(32)
        sock.sendall(opening(1, nonce))
        answer = read_exactly(sock, 3 * 40 + 32 + 40 + 32, until)  # hello, challenge, proof
        theirs = answer[40:72]
        their_nonce = answer[72 + 40 + 8:72 + 40 + 40]
        msg = (b"dpgossip auth v1\0" + bytes([1]) + hello(1) + theirs + nonce + their_nonce)
        proof = hmac.new(b"not-the-cluster-secret-at-all", msg, hashlib.sha256).digest()
        sock.sendall(header(PROOF, len(proof)) + proof)
    elif case == "wrong-rank":
        sock.sendall(opening(0, os.urandom(32)))
        ok = closed(sock, until)
        print("%s (rank 0) %s %s after %.1f s" % (case, me, "closed" if ok else "NOT closed",
                                                    time.monotonic() - start))
        if not ok:
            return 1
        sock = connect(port, until)
        start = time.monotonic()
        me = "%s:%d" % sock.getsockname()
        sock.sendall(opening(99, os.urandom(32)))
    elif case == "bad-length":
        h = hello(1)
        sock.sendall(header(HELLO, 1 << 40) + h)
    elif case != "silent":
        raise SystemExit("unknown case " + case)
    ok = closed(sock, until)
    print("%s %s %s after %.1f s" % (case, me, "closed" if ok else "NOT closed",
                                     time.monotonic() - start))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(play(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 20))
