# -DCTITAN_SANITIZE=address,undefined (any list -fsanitize= takes) instruments ctitan's own code:
# ctitan_core, and through it every target of this tree that links it (the ctitan binary, the test
# and bench programs). libtorch and the other prebuilt libraries stay as they are: ASan's runtime
# still intercepts their malloc/free, so their leaks and bad frees are seen, not their accesses.
# `make test-asan` builds build-asan/ with it and runs the suite (docs/RELIABILITY.md).
set(CTITAN_SANITIZE "" CACHE STRING
    "Sanitizers for ctitan's own targets, as -fsanitize= takes them (e.g. address,undefined); empty: none")

function(ctitan_sanitize target)
  if(NOT CTITAN_SANITIZE)
    return()
  endif()
  # Frame pointers: the sanitizers' fast unwinder gives whole stacks with them.
  set(flags -fsanitize=${CTITAN_SANITIZE} -fno-omit-frame-pointer)
  if(CTITAN_SANITIZE MATCHES "undefined")
    # GCC leaves float-cast-overflow out of -fsanitize=undefined (clang, which the fuzz targets use,
    # includes it); a float converted to an integer it does not fit is UB that RELIABILITY.md
    # promises not to have. Every UBSan finding aborts the process, as an ASan one does, so that
    # a test fails on it instead of printing a line no one reads.
    list(APPEND flags -fsanitize=float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow)
  endif()
  target_compile_options(${target} PUBLIC $<BUILD_INTERFACE:${flags}>)
  # Not limited to this tree: a program linking the installed (instrumented) libctitan_core.a
  # needs the sanitizer runtimes too (tests/install builds examples/custom_loop against it).
  target_link_options(${target} PUBLIC -fsanitize=${CTITAN_SANITIZE})
  message(STATUS "ctitan: sanitizers ${CTITAN_SANITIZE} on ctitan's own targets")
endfunction()
