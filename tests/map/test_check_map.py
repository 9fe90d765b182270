#!/usr/bin/python3
"""tools/check_map.py fails when the map is broken on purpose.

    test_check_map.py CHECKER

Builds small trees in a temporary folder, each with one deliberate violation, runs the checker
on them and expects exit status 1 and the offending file:line (or table row) in its output; a
clean tree must pass. Exit status 0 when every case behaves.
"""

import os
import subprocess
import sys
import tempfile


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as f:
        f.write(text)


# A clean tree: a few rooms including what they may.
CLEAN = {
    "runtime/core/error.h": "#pragma once\n#include <string>\n",
    "runtime/net/transport.h": '#pragma once\n#include "runtime/core/error.h"\n',
    "runtime/process/process.h": '#pragma once\n#include "runtime/core/error.h"\n',
    "apps/launch.h": '#pragma once\n#include "runtime/net/transport.h"\n',
    "dp/clip.cc": '#include "runtime/core/error.h"\n#include <cmath>\n',
    "tools/bench/gloo.cc": '#include "runtime/process/process.h"\n#include <gloo/math.h>\n',
    "tests/unit/test_launch.cc": '#include "apps/launch.h"\n#include <cuda_runtime.h>\n',
    # The meson table: two libraries, one with its sources in a files() list.
    "meson.build": "subdir('dp')\nsubdir('tests')\n",
    "dp/meson.build": "dp_sources = files('clip.cc', # the clip factors\n  'noise.cc')\n"
                      "dp_lib = static_library('dpg_dp', dp_sources, include_directories : inc)\n"
                      "exe = executable('tool', 'tool.cc', dependencies : [dp_dep])\n",
    "tests/meson.build": "executable('test_dp', 'test_dp.cc')\n",
    "docs/ARCHITECTURE.md": "# Architecture\n\nThe meson targets, exactly:\n\n"
                            "| target | sources | depends on |\n| --- | --- | --- |\n"
                            "| `dpg_dp` | `dp/ clip.cc noise.cc` | core |\n"
                            "| `tool` (executable) | `dp/ t*.cc` (a glob) | dp |\n\nAfter.\n"
                            "1. One file, `runtime/train/algo_basic.cc`.\n"
                            "2. One line: `{Algo::single, no,  DPG_FACTORY(make_single)}`.\n",
    "runtime/train/algorithm.cc": "const AlgoInfo kAlgorithms[] = {\n"
                                  "    {Algo::single, no,\n     DPG_FACTORY(make_single)},\n};\n",
    "runtime/train/algo_basic.cc": "std::unique_ptr<Algorithm> make_single(const AlgoSetup& s);\n",
    "dp/tool.cc": "int main() {}\n",
    # The algorithms, the config fields and their docs.
    "runtime/core/train_config.h":
        "enum class Algo { single, all_reduce };\n"
        "template <> struct EnumNames<Algo> {\n"
        '  static constexpr std::string_view names[] = {"single", "all-reduce"};\n};\n'
        "struct TrainConfig {\n  double lr = 1.0;  // step\n  Algo algo = Algo::all_reduce;\n"
        "  std::string trace;\n  std::vector<int> hidden = {256, 10};\n};\n",
    "runtime/core/train_config.cc":
        'field(&C::lr, "lr", "--lr", "rate"),\nfield(&C::algo, "algo", "--algo", "which"),\n'
        'field(&C::trace, "trace", "--trace", "file"),\n'
        'field(&C::hidden, "hidden", "--hidden", "widths"),\n',
    "tools/sweep.py": 'ALGOS = ("single", "all-reduce")\nGRAPH_ALGOS = ("all-reduce",)\n',
    "docs/TRAINING.md": "| field | default | meaning |\n| --- | --- | --- |\n"
                        "| `lr` | `1` | rate |\n| `algo` | `all-reduce` | which |\n"
                        "| `trace` | `\"\"` | file |\n| `hidden` | `[256, 10]` | widths |\n\n"
                        "| flag | meaning |\n| `--rank R` | rank |\n",
}

# (name, files added to the clean tree, text the checker's output must contain, check); the
# check is "includes" unless a fourth element names another.
CASES = [
    ("dp includes the transport", {"dp/mechanism.cc": '#include <vector>\n\n'
                                   '#include "runtime/net/transport.h"\n'},
     'dp/mechanism.cc:3: dp/ may not include "runtime/net/transport.h"'),
    ("tools include apps", {"tools/bench/mpi.cc": '#include "apps/launch.h"\n'},
     'tools/bench/mpi.cc:1: tools/ may not include "apps/launch.h"'),
    ("runtime includes tools", {"runtime/core/log.cc": '#include "tools/bench/row.h"\n',
                                "tools/bench/row.h": "#pragma once\n"},
     'runtime/core/log.cc:1: runtime/core/ may not include "tools/bench/row.h"'),
    ("Asio outside tcp", {"runtime/net/hosts.cc": "#include <boost/asio.hpp>\n"},
     "runtime/net/hosts.cc:1: runtime/net/ may not include <boost/asio.hpp>"),
    ("CUDA in the CPU model", {"runtime/model/mlp.cc": "// x\n#include <cuda_runtime.h>\n"},
     "runtime/model/mlp.cc:2: runtime/model/ may not include <cuda_runtime.h>"),
    ("the standalone row header includes the project",
     {"runtime/core/bench_row.h": '#pragma once\n#include "runtime/core/error.h"\n'},
     "runtime/core/bench_row.h:2: runtime/core/bench_row.h is included by programs that link no"),
    ("a std:: distribution in topology/", {"topology/generators.cc": "#include <random>\n"},
     "topology/generators.cc:1: topology/ may not include <random> (std:: distributions"),
    ("a header that does not exist", {"dp/noise.cc": '#include "dp/gone.h"\n'},
     'dp/noise.cc:1: "dp/gone.h" does not exist'),
    ("the trainer includes NCCL",
     {"runtime/train/gossip.cc": '#include "runtime/collective/nccl/nccl_communicator.h"\n',
      "runtime/collective/nccl/nccl_communicator.h": "#pragma once\n"},
     'runtime/train/gossip.cc:1: runtime/train/ may not include '
     '"runtime/collective/nccl/nccl_communicator.h"'),
    ("a source the table lacks",
     {"dp/meson.build": "dp_lib = static_library('dpg_dp', 'clip.cc', 'noise.cc', 'pld.cc')\n"
                        "exe = executable('tool', 'tool.cc')\n"},
     "docs/ARCHITECTURE.md:7: the sources of dpg_dp differ from meson's: built but not "
     "listed: dp/pld.cc", "meson"),
    ("a file the glob finds that meson does not build", {"dp/tool2.cc": "\n"},
     "docs/ARCHITECTURE.md:8: the sources of tool differ from meson's: listed but not built: "
     "dp/tool2.cc", "meson"),
    ("a target the table lacks",
     {"dp/meson.build": "dp_lib = static_library('dpg_dp', 'clip.cc', 'noise.cc')\n"
                        "exe = executable('tool', 'tool.cc')\n"
                        "static_library('dpg_dp_noise', 'noise.cc')\n"},
     "the meson target `dpg_dp_noise` has no row in the table", "meson"),
    ("a walk-through that quotes another table line",
     {"runtime/train/algorithm.cc": "{Algo::single, yes, DPG_FACTORY(make_single)},\n"},
     "differs from runtime/train/algorithm.cc's '{Algo::single, yes, DPG_FACTORY(make_single)}'",
     "walkthrough"),
    ("a walk-through whose file lacks the factory",
     {"runtime/train/algo_basic.cc": "// moved\n"},
     "runtime/train/algo_basic.cc does not define make_single", "walkthrough"),
    ("an algorithm the sweep lacks", {"tools/sweep.py": 'ALGOS = ("single",)\n'},
     "tools/sweep.py:1: ALGOS ['single'] differs from", "algos"),
    ("a field the docs lack",
     {"docs/TRAINING.md": "| field | default | meaning |\n| --- | --- | --- |\n"
                          "| `lr` | `1` | rate |\n| `algo` | `all-reduce` | which |\n"
                          "| `trace` | `\"\"` | file |\n"},
     "docs/TRAINING.md: the config field `hidden`", "config"),
    ("an algorithm that sends on the transport",
     {"runtime/train/algo_ps_sync.cc": "void f(Comm& comm_) {\n  comm_.send(1, {}, w);  // ok\n"
                                       "  comm_.transport().send(1, {}, bytes);\n}\n"},
     "runtime/train/algo_ps_sync.cc:3: transport...send( posts a send", "wire"),
    ("a default the docs have wrong",
     {"docs/TRAINING.md": "| field | default | meaning |\n| --- | --- | --- |\n"
                          "| `lr` | `0.1` | rate |\n| `algo` | `all-reduce` | which |\n"
                          "| `trace` | `\"\"` | file |\n| `hidden` | `[256, 10]` | widths |\n"},
     "docs/TRAINING.md:3: `lr`'s default is `0.1` here and 1.0", "config"),
    ("a seed from std::random_device",
     {"dp/clip.cc": "// std::random_device is named in a comment: fine\n"
                    "unsigned seed() {\n  std::random_device rd;\n  return rd();\n}\n"},
     "dp/clip.cc:3: std::random_device may read the CPU's RDRAND", "entropy"),
]
CHECKS = "includes,wire,meson,algos,config,walkthrough,entropy"


def run(checker, root, only):
    done = subprocess.run([sys.executable, checker, "--root", root, "--only", only],
                          capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    checker = argv[0]
    failures = []
    with tempfile.TemporaryDirectory(prefix="check_map.") as tmp:
        clean = os.path.join(tmp, "clean")
        for path, text in CLEAN.items():
            write(clean, path, text)
        code, out = run(checker, clean, CHECKS)
        if code != 0:
            failures.append(f"clean tree: exit {code}, expected 0:\n{out}")
        for i, (name, files, expected, *check) in enumerate(CASES):
            root = os.path.join(tmp, f"case{i}")
            for path, text in {**CLEAN, **files}.items():
                write(root, path, text)
            code, out = run(checker, root, check[0] if check else "includes")
            if code != 1 or expected not in out:
                failures.append(f"{name}: exit {code} (expected 1), output lacks "
                                f"{expected!r}:\n{out}")
            else:
                print(f"ok: {name}: {expected}")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
