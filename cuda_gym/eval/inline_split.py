"""Split a KernelBench-format CUDA source into a torch-free kernel file and a host C++ file.

A `load_inline` CUDA source mixes kernels with host wrappers that use torch (`torch::Tensor`,
`empty_like`, `data_ptr`). Compiled as one `.cu` file, nvcc parses torch's headers three times
(device front end, host front end, host compiler): about 28 s on the H200, while the kernels
alone compile in about a second. This module cuts the source, at its top-level declarations, into

- a kernel file for nvcc: kernels, device functions and shared types, with CUDA and standard
  headers but no torch headers; and
- a host file for g++ (appended to the C++ sources, compiled with torch's precompiled header):
  the host wrappers, each `kernel<<<config>>>(args)` rewritten into what nvcc itself emits
  for a launch, `__cudaPushCallConfiguration(config)` then a call of the kernel's host stub (the
  same lowering clang uses; the stub has the kernel's name and signature, and the CUDA runtime
  identifies the kernel by it).

Every part of the candidate ends up in exactly one place with its text unchanged (types and
constants in both), so the split changes where code is compiled, not what it does. Anything this
simple cut cannot place with certainty raises `NotSplittable` and the candidate is built as
written: templates (their kernels are instantiated by host launches), namespaces and `extern`
blocks, conditional compilation, launches inside macros, device symbols or torch used by the other
side, and CUDA flags that change host code. A source without kernels (a cuBLAS or cuDNN wrapper)
splits too: all of it is host code.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# What a kernel file may need that torch/types.h used to bring in.
KERNEL_PRELUDE = """#include <cuda.h>
#include <cuda_runtime.h>
#include <cstddef>
#include <cstdint>
#include <cfloat>
#include <climits>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
"""

HOST_PRELUDE = """#include <cuda.h>
#include <cuda_runtime.h>
// A kernel launch as nvcc lowers it: push the launch configuration, then call the kernel's stub.
extern "C" unsigned __cudaPushCallConfiguration(dim3, dim3, size_t, struct CUstream_st*);
static inline unsigned cuda_gym_push_launch(dim3 grid, dim3 block, size_t shared_bytes = 0,
                                            cudaStream_t stream = 0) {
    return __cudaPushCallConfiguration(grid, block, shared_bytes, stream);
}
"""

# cuda_runtime.h declares its kernel-taking C++ overloads (cudaFuncSetAttribute(kernel, ...)) only for
# nvcc (__CUDACC__); host code that calls them gets these. Each takes a trailing empty pack, so where
# a header does declare the plain template, that one is more specialised and wins: no redefinition.
KERNEL_API_PRELUDE = """template <class T, class... Unused> static inline cudaError_t cudaFuncSetAttribute(
        T* kernel, cudaFuncAttribute attribute, int value, Unused...) {
    return cudaFuncSetAttribute((const void*)kernel, attribute, value);
}
template <class T, class... Unused> static inline cudaError_t cudaFuncGetAttributes(
        cudaFuncAttributes* attributes, T* kernel, Unused...) {
    return cudaFuncGetAttributes(attributes, (const void*)kernel);
}
template <class T, class... Unused> static inline cudaError_t cudaFuncSetCacheConfig(
        T* kernel, cudaFuncCache config, Unused...) {
    return cudaFuncSetCacheConfig((const void*)kernel, config);
}
template <class T, class... Unused> static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        int* blocks, T* kernel, int block_size, size_t shared_bytes, Unused...) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, (const void*)kernel, block_size, shared_bytes);
}
"""
_KERNEL_API_CALL = re.compile(r"\b(cudaFuncSetAttribute|cudaFuncGetAttributes|cudaFuncSetCacheConfig|"
                              r"cudaOccupancyMaxActiveBlocksPerMultiprocessor)\s*\(")

_DEVICE_WORDS = re.compile(r"\b(__device__|__constant__|__shared__|__managed__|__host__|__forceinline__|"
                           r"__noinline__|template)\b")
_TORCH = re.compile(r"\b(torch|at|c10|pybind11|py)\s*::|\b(TORCH|AT|C10)_[A-Z_]+\b|\bPYBIND11")
_TORCH_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"](torch|ATen|c10|pybind11|caffe2)/")
_CONDITIONAL = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif|error|line)\b")
_HALF_TYPES = re.compile(r"\b(__half2?|half2?|__nv_bfloat162?|nv_bfloat162?)\b")
_DIRECTIVE_IN_ITEM = re.compile(r"^\s*#\s*(\w+)", re.M)
_TYPE_DECLARATION = re.compile(r"^\s*(typedef|using|struct|class|union|enum|static_assert)\b")
_CONSTANT = re.compile(r"\b(const|constexpr)\b")
_LAUNCH_QUALIFIERS = re.compile(r"\b(__launch_bounds__|__maxnreg__|__cluster_dims__)\s*\(")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# nvcc flags that only affect device code (or nothing the host file would see differently).
_DEVICE_ONLY_FLAG = re.compile(
    r"^(|-O[0-3s]?|-?-use_fast_math|--?generate-line-info|-lineinfo|--?expt-relaxed-constexpr|"
    r"--?expt-extended-lambda|--?extended-lambda|--?(gpu-)?arch[= ].*|-arch=.*|"
    r"-gencode.*|--?ptxas-options.*|-Xptxas.*|-v|-res-usage|--?maxrregcount.*|--extra-device-vectorization|"
    r"-ftz=.*|-prec-div=.*|-prec-sqrt=.*|-fmad=.*|--ftz=.*|--prec-div=.*|--prec-sqrt=.*|--fmad=.*)$")
# g++ flags that cannot change what the host wrappers compute.
_PLAIN_CXX_FLAG = re.compile(r"^(|-O[0-3s]?|-w|-W[\w=-]*|-g\d?|-fPIC|-pipe)$")


class NotSplittable(ValueError):
    """The source cannot be split with certainty; build it as written."""


@dataclass
class Split:
    kernel_source: str
    host_source: str
    kernels: list[str] = field(default_factory=list)


def _check_line_splices(source: str) -> None:
    """A backslash at a line's end joins lines before anything else is read; only directives may
    use it here (elsewhere, e.g. ending a // comment, it would hide code from this scan)."""
    continued = False
    for line in source.split("\n"):
        spliced = line.rstrip("\r").endswith("\\")
        if spliced and not (continued or line.lstrip().startswith("#")):
            raise NotSplittable("a line splice (backslash-newline) outside a preprocessor directive")
        continued = spliced and (continued or line.lstrip().startswith("#"))


def mask(source: str) -> str:
    """The source with comments and the contents of string and character literals blanked to
    spaces (newlines kept), so positions match and code structure can be scanned safely. Raises
    NotSplittable on what this scan does not model (line splices outside directives, prefixed raw
    strings, prefixed character literals)."""
    _check_line_splices(source)
    out = list(source)
    i, n = 0, len(source)

    def blank(start: int, end: int) -> None:
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "

    def word_before(position: int) -> str:
        start = position
        while start > 0 and (source[start - 1].isalnum() or source[start - 1] in "_."):
            start -= 1
        return source[start:position]

    while i < n:
        c = source[i]
        if source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
        elif c in "\"'":
            before = word_before(i)
            if c == "'" and before and before[0].isdigit():  # digit separator (1'000)
                i += 1
                continue
            if c == '"' and before == "R":
                open_paren = source.find("(", i + 1)
                if open_paren < 0:
                    raise NotSplittable("unterminated raw string")
                delimiter = ")" + source[i + 1:open_paren] + '"'
                end = source.find(delimiter, open_paren)
                if end < 0:
                    raise NotSplittable("unterminated raw string")
                blank(i + 1, end + len(delimiter) - 1)
                i = end + len(delimiter)
                continue
            if before:  # u8"..", L'x', u8R"(..)", a user-defined literal suffix before a quote, ...
                raise NotSplittable(f"a literal prefixed with {before!r}")
            k = i + 1
            while k < n and source[k] != c:
                if source[k] == "\n":
                    raise NotSplittable("unterminated literal")
                k += 2 if source[k] == "\\" else 1
            blank(i + 1, min(k, n))
            i = k + 1
        else:
            i += 1
    return "".join(out)


def _outside_parentheses(text: str) -> str:
    """`text` with what is inside () and [] blanked (same length), so the `=` of a default argument
    or the contents of a subscript do not count as top level."""
    out, depth = [], 0
    for char in text:
        if char in "([":
            depth += 1
            out.append(char if depth == 1 else " ")
        elif char in ")]":
            depth -= 1
            out.append(char if depth == 0 else " ")
        else:
            out.append(char if depth == 0 else " ")
    return "".join(out)


def _matching(text: str, start: int, open_char: str, close_char: str) -> int:
    """Index of the bracket closing the one at `start`."""
    depth = 0
    for k in range(start, len(text)):
        if text[k] == open_char:
            depth += 1
        elif text[k] == close_char:
            depth -= 1
            if depth == 0:
                return k
    raise NotSplittable(f"unbalanced {open_char}{close_char}")


def _chunks(masked: str) -> list[tuple[str, int, int]]:
    """Top-level pieces of the source: ("directive" | "item", start, end)."""
    chunks: list[tuple[str, int, int]] = []
    i, n, start = 0, len(masked), 0
    depth = 0  # () [] {} together
    at_line_start = True
    while i < n:
        c = masked[i]
        if at_line_start and c == "#" and depth == 0:
            if masked[start:i].strip():
                raise NotSplittable("preprocessor directive inside a declaration")
            end = i
            while True:
                end = masked.find("\n", end)
                if end < 0:
                    end = n
                    break
                if masked[end - 1] != "\\":
                    break
                end += 1
            chunks.append(("directive", i, end))
            i = start = end
            continue
        if c == "\n":
            at_line_start = True
        elif not c.isspace():
            at_line_start = False
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                raise NotSplittable("unbalanced brackets")
            if c == "}" and depth == 0:
                head = _outside_parentheses(masked[start:masked.index("{", start)])
                type_or_initializer = re.search(r"\b(struct|class|union|enum)\b|=", head)
                if "(" not in head and not type_or_initializer:
                    raise NotSplittable("namespace or extern block")
                if not type_or_initializer:  # a function body ends the item; a type or initializer runs to its ;
                    chunks.append(("item", start, i + 1))
                    start = i + 1
        elif c == ";" and depth == 0:
            chunks.append(("item", start, i + 1))
            start = i + 1
        i += 1
    if masked[start:].strip():
        raise NotSplittable("text after the last declaration")
    return chunks


def _head(masked_item: str) -> str:
    """A declaration's text before its body or initializer (an `=` inside parentheses, a default
    argument, does not end it)."""
    top = _outside_parentheses(masked_item)
    cut = len(masked_item)
    for char in "{=;":
        position = top.find(char)
        if position >= 0:
            cut = min(cut, position)
    return masked_item[:cut]


def _declared_name(head: str) -> str | None:
    """The name a declaration introduces (the identifier before its first top-level parenthesis,
    bracket or the end), skipping CUDA qualifiers with arguments."""
    head = _strip_qualifiers(head)
    head = re.sub(r"\btemplate\s*<[^{;]*?>\s*(?=(struct|class|union|typename|\w+\s))", " ", head)
    cut = len(head)
    for char in "([":
        position = head.find(char)
        if position >= 0:
            cut = min(cut, position)
    names = _IDENTIFIER.findall(head[:cut])
    return names[-1] if names else None


def _strip_qualifiers(head: str) -> str:
    while True:
        match = _LAUNCH_QUALIFIERS.search(head)
        if not match:
            return head
        end = _matching(head, match.end() - 1, "(", ")")
        head = head[:match.start()] + " " * (end + 1 - match.start()) + head[end + 1:]


def _kernel_declaration(text: str, code: str) -> tuple[str, str]:
    """(name, host-stub declaration) of a non-template `__global__` function."""
    body = code.find("{")
    head = _strip_qualifiers(code[:body] if body >= 0 else code.rstrip().rstrip(";"))
    open_paren = head.find("(")
    if open_paren < 0:
        raise NotSplittable("kernel without a parameter list")
    close_paren = _matching(head, open_paren, "(", ")")
    if head[close_paren + 1:].strip():
        raise NotSplittable("text after a kernel's parameter list")
    prefix = head[:open_paren]
    extern_c = re.match(r'\s*extern\s*"C"\s*', text[:open_paren])  # masked code has the "C" blanked
    if extern_c:
        prefix = prefix[extern_c.end():]
    words = prefix.split()
    if len(words) != 3 or sorted(words[:2]) != ["__global__", "void"] or not _IDENTIFIER.fullmatch(words[2]):
        raise NotSplittable(f"kernel declaration not of the form `__global__ void name(...)`: {' '.join(words)}")
    parameters = head[open_paren + 1:close_paren]
    if "=" in parameters:
        raise NotSplittable("a kernel with default arguments")
    linkage = 'extern "C" ' if extern_c else ""
    return words[2], f"{linkage}void {words[2]}({text[open_paren + 1:close_paren]});"


def _rewrite_launches(text: str, masked: str, kernels: set[str]) -> str:
    """Each `kernel<<<config>>>(args)` becomes `(cuda_gym_push_launch(config) ? (void)0 : kernel(args))`."""
    pieces, position = [], 0
    for match in re.finditer(r"<<<", masked):
        if match.start() < position:
            continue
        before = re.search(r"([A-Za-z_]\w*)\s*$", masked[position:match.start()])
        if not before or before.group(1) not in kernels:
            raise NotSplittable("a launch of something other than a named, non-template kernel")
        name_start = position + before.start(1)
        config_end = masked.find(">>>", match.end())
        if config_end < 0:
            raise NotSplittable("unterminated launch configuration")
        open_paren = config_end + 3
        while open_paren < len(masked) and masked[open_paren].isspace():
            open_paren += 1
        if open_paren >= len(masked) or masked[open_paren] != "(":
            raise NotSplittable("launch without arguments")
        close_paren = _matching(masked, open_paren, "(", ")")
        config = text[match.end():config_end]
        pieces.append(text[position:name_start])
        pieces.append(f"(cuda_gym_push_launch({config}) ? (void)0 : {before.group(1)}"
                      f"{text[open_paren:close_paren + 1]})")
        position = close_paren + 1
    pieces.append(text[position:])
    return "".join(pieces)


def check_flags(extra_cuda_cflags: list[str], extra_cflags: list[str]) -> None:
    """Refuse flags under which the host code would mean something else once compiled by g++ with
    the C++ flags instead of by nvcc with the CUDA flags (macros, host compiler options)."""
    for flag in extra_cuda_cflags:
        if not _DEVICE_ONLY_FLAG.match(flag.strip()):
            raise NotSplittable(f"CUDA flag {flag!r} may change host code")
    for flag in extra_cflags:
        if not _PLAIN_CXX_FLAG.match(flag.strip()):
            raise NotSplittable(f"C++ flag {flag!r} would now apply to the host wrappers too")


def split_cuda_source(source: str) -> Split:
    """Split one load_inline CUDA source; raises NotSplittable when it cannot be done with certainty."""
    masked = mask(source)
    kernel_parts, host_parts = [KERNEL_PRELUDE], [HOST_PRELUDE]
    kernels: dict[str, str] = {}
    device_names: set[str] = set()
    host_items: list[tuple[int, str, str]] = []  # (index in host_parts, text, masked text)
    macros: list[str] = []  # defined by the source: undefined after the host part, before the bindings

    for kind, start, end in _chunks(masked):
        text, code = source[start:end], masked[start:end]
        if not code.strip():
            continue
        if kind == "directive":
            if _CONDITIONAL.match(code):
                raise NotSplittable("conditional compilation")
            if "<<<" in code:
                raise NotSplittable("a kernel launch inside a macro")
            if re.match(r"\s*#\s*pragma\b(?!\s*once\b)", code):
                raise NotSplittable("a top-level #pragma (it would reach the bindings too)")
            defined = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)", code)
            if defined:
                macros.append(defined.group(1))
            if not _TORCH_INCLUDE.match(code):
                kernel_parts.append(text)
            host_parts.append(text)
            continue
        directives = _DIRECTIVE_IN_ITEM.findall(code)
        if any(word in ("define", "undef", "include") for word in directives):
            raise NotSplittable("a #define, #undef or #include inside a declaration")
        device_side = "__global__" in code or _DEVICE_WORDS.search(code)
        if not device_side and any(word != "pragma" for word in directives):
            raise NotSplittable("conditional compilation in host code")
        if "__global__" in code:
            if re.search(r"\b(template|static)\b", code):
                raise NotSplittable("template or static kernel")
            if _TORCH.search(code):
                raise NotSplittable("torch used in a kernel")
            name, declaration = _kernel_declaration(text, code)
            if name in kernels and kernels[name] != declaration:
                raise NotSplittable(f"overloaded kernel {name}")
            kernels[name] = declaration
            kernel_parts.append(text)
            host_parts.append(declaration)
        elif _DEVICE_WORDS.search(code):
            if _TORCH.search(code):
                raise NotSplittable("torch used in device code")
            if re.search(r"\boperator\b", code):  # found implicitly (a + b), so no name check could see its use
                raise NotSplittable("an operator defined in device or template code")
            name = _declared_name(_head(code))
            if name:
                device_names.add(name)
            kernel_parts.append(text)
        elif re.match(r"\s*using\s+namespace\s+(torch|at|c10)\b", code):
            host_parts.append(text)
        elif _TYPE_DECLARATION.match(code) or (_CONSTANT.search(_head(code)) and code.rstrip().endswith(";")
                                               and "(" not in _head(code)):
            if _TORCH.search(code):
                raise NotSplittable("torch used in a shared type or constant")
            kernel_parts.append(text)
            host_parts.append(text)
        else:
            host_items.append((len(host_parts), text, code))
            host_parts.append(text)

    # No kernels (a cuBLAS or cuDNN wrapper): everything is host code, and the kernel file keeps only
    # the CUDA headers and shared types (nvcc compiles it in about a second instead of parsing torch).
    for index, text, code in host_items:
        if _HALF_TYPES.search(code):
            raise NotSplittable("half or bfloat16 types in host code (nvcc compiles it with torch's "
                                "__CUDA_NO_HALF_OPERATORS__-style macros, g++ without)")
        used = set(_IDENTIFIER.findall(code))
        if used & device_names:
            raise NotSplittable(f"host code uses device symbols {sorted(used & device_names)}")
        host_parts[index] = _rewrite_launches(text, code, set(kernels))
    if any(_KERNEL_API_CALL.search(code) for _, _, code in host_items):
        host_parts.insert(1, KERNEL_API_PRELUDE)
    host_parts += [f"#undef {name}" for name in dict.fromkeys(macros)]
    return Split("\n".join(kernel_parts) + "\n", "\n".join(host_parts) + "\n", sorted(kernels))
