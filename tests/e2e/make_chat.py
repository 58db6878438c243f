#!/usr/bin/python3
"""make_chat.py OUT N SEED [--long] — N short chat conversations as JSON Lines,
deterministic for a seed: {"messages": [{"role", "content"}, ...]} with an
optional system message and one to three user/assistant turns of a few
words, so that a window of 64 tokens (bytes) holds several conversations.
--long: longer turns (documents longer than a window as well)."""
import json
import random
import sys

WORDS = ("the cat sat on a mat and we like to read books about stars rivers code "
         "why how when blue green fast slow yes no maybe please thanks").split()


def main():
    out, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    long_ = "--long" in sys.argv[4:]
    r = random.Random(seed)
    hi = 30 if long_ else 3
    with open(out, "w") as f:
        for _ in range(n):
            msgs = []
            if r.random() < 0.25:
                msgs.append({"role": "system", "content": "Be brief."})
            for _ in range(r.randint(1, 3 if long_ else 2)):
                msgs.append({"role": "user",
                             "content": " ".join(r.choice(WORDS) for _ in range(r.randint(1, hi))) + "?"})
                msgs.append({"role": "assistant",
                             "content": " ".join(r.choice(WORDS) for _ in range(r.randint(1, hi))) + "."})
            f.write(json.dumps({"messages": msgs}) + "\n")


if __name__ == "__main__":
    main()
