"""Every code block in README.md and docs/*.md against the code it shows: C and C++ compiled against the headers,
the CMake block configured and built against an installed tree with a C++ block as its program, C# compiled with
bindings/csharp/Pt2rt.cs (Unity's and Unreal's few types stubbed), Rust type-checked against bindings/rust, Python
run in a fresh interpreter (a block that exports only has its imports run), and in shell blocks every command of
the project's - make targets, export-tools subcommands and options (parsed), pt2run and pt2serve subcommands and
options, scripts - checked to exist. Shell commands are not run: they build, export and serve."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from packages import pt2run_path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"", "sh", "bash", "shell", "console"}


def blocks(*langs: str) -> list[tuple[str, str]]:
    """(where, text) of each fenced block in a language of `langs`; where is FILE:LINE."""
    out = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = re.match(r"^```(\w*)\s*$", lines[i])
            if not m:
                i += 1
                continue
            start = i
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            i += 1
            if m.group(1) in langs:
                out.append((f"{doc.relative_to(ROOT)}:{start + 1}", "\n".join(body) + "\n"))
    return out


def ids(items):
    return [where for where, _ in items]


def run(cmd, where, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert result.returncode == 0, f"{where}: {' '.join(map(str, cmd))}\n{result.stdout}\n{result.stderr}"
    return result


def split_includes(text: str) -> tuple[str, str]:
    head = [line for line in text.splitlines() if line.startswith("#include")]
    body = [line for line in text.splitlines() if not line.startswith("#include")]
    return "\n".join(head), "\n".join(body)


# the inputs the snippets run on
C_PRELUDE = "static float pixels[1 * 3 * 224 * 224];\nstatic float data[1 * 3 * 32 * 32];\n"


@pytest.mark.parametrize("where, text", blocks("c"), ids=ids(blocks("c")))
def test_c_blocks_compile(where, text, tmp_path):
    head, body = split_includes(text)
    src = tmp_path / "snippet.c"
    src.write_text(f"#include <stdio.h>\n#include <stdint.h>\n{head}\n{C_PRELUDE}int main(void) {{\n{body}\n"
                   "return 0;\n}\n")
    run(["cc", "-std=c99", "-Werror=implicit-function-declaration", "-Werror=incompatible-pointer-types",
         "-fsyntax-only", f"-I{ROOT / 'runtime' / 'include'}", str(src)], where)


def _cpp_program(text: str) -> str:
    head, body = split_includes(text)
    return (f"#include <vector>\n#include <pt2rt/pt2rt.h>\n{head}\n{C_PRELUDE}int main() {{\n{body}\n"
            "(void)pixels; (void)data;\nreturn 0;\n}\n")


@pytest.mark.parametrize("where, text", blocks("cpp"), ids=ids(blocks("cpp")))
def test_cpp_blocks_compile(where, text, tmp_path):
    src = tmp_path / "snippet.cpp"
    # an op's lite entry is a translation unit of its own (a function at namespace scope), the others main's body
    src.write_text(text if "PT2RT_LITE_OP(" in text else _cpp_program(text))
    run(["c++", "-std=c++17", "-fsyntax-only", f"-I{ROOT / 'runtime' / 'include'}", str(src)], where)


@pytest.mark.parametrize("where, text", blocks("cmake"), ids=ids(blocks("cmake")))
def test_cmake_blocks_build_a_cpp_block_against_an_installed_tree(where, text, tmp_path):
    """The CMake block as a project's own, its program the first C++ block, against `cmake --install` of the build."""
    build = pt2run_path().parent.parent
    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or "cmake"
    run([cmake, "--install", str(build), "--prefix", str(tmp_path / "dist")], where)
    project = tmp_path / "app"
    project.mkdir()
    (project / "main.cpp").write_text(_cpp_program(blocks("cpp")[0][1]))
    (project / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.25)\nproject(app CXX)\n"
                                            "add_executable(app main.cpp)\n" + text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMAKE_")}
    import torch  # libpt2rt.so's RUNPATH is $ORIGIN once installed: the linker finds libtorch through this
    torch_lib = Path(torch.__file__).parent / "lib"
    run([cmake, "-S", str(project), "-B", str(project / "build"), f"-DCMAKE_PREFIX_PATH={tmp_path / 'dist'}",
         f"-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,{torch_lib}"], where, env=env)
    run([cmake, "--build", str(project / "build")], where, env=env)


CSHARP_STUBS = """
using System.Collections.Generic;
namespace UnrealBuildTool {
  public enum ModuleType { External }
  public class ReadOnlyTargetRules {}
  public class RuntimeDependencyList { public void Add(string path, string source) {} }
  public class ModuleRules {
    public ModuleRules(ReadOnlyTargetRules target) {}
    public ModuleType Type;
    public string ModuleDirectory = "";
    public List<string> PublicIncludePaths = new List<string>();
    public List<string> PublicAdditionalLibraries = new List<string>();
    public RuntimeDependencyList RuntimeDependencies = new RuntimeDependencyList();
  }
}
namespace UnityEngine {
  public static class Application { public static string streamingAssetsPath = ""; }
  public class MonoBehaviour {}
  public class TextAsset { public byte[] bytes; }
}
"""


def test_csharp_blocks_compile_with_the_binding(tmp_path):
    files = [ROOT / "bindings" / "csharp" / "Pt2rt.cs", tmp_path / "stubs.cs"]
    (tmp_path / "stubs.cs").write_text(CSHARP_STUBS)
    found = blocks("csharp")
    assert found, "no C# blocks found"
    for n, (where, text) in enumerate(found):
        usings = "using System;\nusing System.IO;\nusing UnityEngine;\nusing UnrealBuildTool;\n"
        if re.search(r"^\s*(public\s+)?class\s", text, re.M):  # types of its own (Unreal's Pt2rt is another assembly's)
            code = f"{usings}// {where}\nnamespace Snippet{n} {{\n{text}\n}}\n"
        else:  # statements
            code = (f"{usings}// {where}\nstatic class Snippet{n} {{\n  static void Run() {{\n"
                    f"    float[] pixels = new float[1 * 3 * 224 * 224];\n{text}\n  }}\n}}\n")
        files.append(tmp_path / f"snippet{n}.cs")
        files[-1].write_text(code)
    run(["mcs", "-nologo", "-target:library", f"-out:{tmp_path / 'snippets.dll'}", *map(str, files)],
        ", ".join(ids(found)))


def test_rust_blocks_type_check_against_the_crate(tmp_path):
    found = blocks("rust")
    assert found, "no Rust blocks found"
    crate = tmp_path / "snippets"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text(
        '[package]\nname = "snippets"\nversion = "0.0.0"\nedition = "2021"\n\n'
        f'[dependencies]\npt2rt = {{ path = "{ROOT / "bindings" / "rust"}" }}\n')
    fns = [f"// {where}\n#[allow(unused)]\nfn snippet{n}(pixels: &[f32]) -> Result<(), pt2rt::Error> {{\n{text}\nOk(())\n}}\n"
           for n, (where, text) in enumerate(found)]
    (crate / "src" / "main.rs").write_text("".join(fns) + "fn main() {}\n")
    build = pt2run_path().parent.parent
    env = {**os.environ, "PT2RT_LIB_DIR": str(build / "lib"), "CARGO_TARGET_DIR": str(build / "docs-rust"),
           "CARGO_HOME": str(tmp_path / "cargo-home")}
    run(["cargo", "check", "--offline", "--quiet", "--manifest-path", str(crate / "Cargo.toml")],
        ", ".join(ids(found)), env=env)


def _imports(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if re.match(r"(import|from)\s", line))


@pytest.mark.parametrize("where, text", blocks("python"), ids=ids(blocks("python")))
def test_python_blocks_run_in_a_fresh_interpreter(where, text):
    """Run as written (after `x`, an NCHW batch, is defined); a block that exports a model has its imports run."""
    compile(text, where, "exec")
    code = _imports(text) if "export_package(" in text else "import torch\nx = torch.randn(2, 3, 8, 8)\n" + text
    ops = pt2run_path().parent.parent / "lib" / "libidentity_conv_ops.so"
    run([sys.executable, "-c", code], where, cwd=ROOT, env={**os.environ, "IDENTITY_CONV_OPS_LIBRARY": str(ops)})


def _help(*cmd: str) -> str:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=60).stdout


def _without_prefix(cmd: list[str]) -> list[str]:
    """A command without its leading VAR=value assignments and `env` options."""
    while cmd:
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[0]):
            cmd = cmd[1:]
        elif cmd[0] == "env":
            cmd = cmd[1:]
            while cmd and cmd[0].startswith("-"):
                cmd = cmd[2:] if cmd[0] == "-u" else cmd[1:]
        else:
            break
    return cmd


def _commands(text: str):
    """The commands of a shell block: prompts, continuations and comments handled, split at ; && || |."""
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.strip().removeprefix("$ ")
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:  # output, not a command
            continue
        command: list[str] = []
        for token in tokens + [";"]:
            if token in (";", "&&", "||", "|"):
                command = _without_prefix(command)
                if command:
                    yield command
                command = []
            else:
                command.append(token)


def test_shell_blocks_name_commands_that_exist():
    """make targets, export-tools subcommands and options, pt2run/pt2serve subcommands and options, scripts."""
    from export_tools.__main__ import build_parser
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9_-]*):", makefile, re.M))
    pt2run = str(pt2run_path())
    pt2serve = str(pt2run_path().with_name("pt2serve"))
    helps: dict[tuple, str] = {}
    problems, checked = [], 0
    for where, text in blocks(*SHELL):
        for cmd in _commands(text):
            name = Path(cmd[0]).name
            placeholder = any("..." in a or a.startswith("<") for a in cmd)
            if name == "make":
                checked += 1
                for t in cmd[1:]:
                    if not t.startswith("-") and "=" not in t and t not in targets:
                        problems.append(f"{where}: make {t}: no such target in the Makefile")
            elif name in ("python", "python3") and cmd[1:3] == ["-m", "export_tools"] or name == "export-tools":
                checked += 1
                args = cmd[3:] if name != "export-tools" else cmd[1:]
                if placeholder:
                    args = args[:1] + ["--help"] if args and not args[0].startswith("-") else ["--help"]
                try:
                    build_parser().parse_args(args)
                except SystemExit as e:
                    if e.code != 0:
                        problems.append(f"{where}: export-tools {' '.join(args)}: refused by its parser")
            elif name in ("pt2run", "pt2serve"):
                checked += 1
                sub = cmd[1] if name == "pt2run" and len(cmd) > 1 else ""
                binary = pt2run if name == "pt2run" else pt2serve
                if name == "pt2run" and sub not in ("info", "run", "verify", "bench"):
                    problems.append(f"{where}: pt2run {sub}: no such subcommand")
                    continue
                key = (binary, sub)
                if key not in helps:
                    helps[key] = _help(binary, *([sub] if sub else []), "--help")
                for a in cmd[1:]:
                    flag = a.split("=", 1)[0]
                    if flag.startswith("-") and not re.search(rf"(^|[\s,]){re.escape(flag)}\b", helps[key]):
                        problems.append(f"{where}: {name} {sub} {flag}: not an option of it")
            elif cmd[0].startswith("scripts/"):
                checked += 1
                if not (ROOT / cmd[0]).is_file():
                    problems.append(f"{where}: {cmd[0]}: no such script")
    assert checked > 20, f"only {checked} commands found: the block parser broke"
    assert problems == [], "\n".join(problems)
