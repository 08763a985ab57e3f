# Where libtorch comes from. In order:
#   1. the user's own: -DCMAKE_PREFIX_PATH=/path/to/libtorch or -DTorch_DIR=... (CPU or CUDA);
#   2. the torch package of CTITAN_PYTHON (the venv of scripts/setup_venv.sh, which `make` passes),
#      found through torch.utils.cmake_prefix_path.
set(CTITAN_PYTHON "" CACHE FILEPATH "Python whose torch package provides libtorch (scripts/setup_venv.sh)")

if(NOT Torch_DIR AND CTITAN_PYTHON)
  execute_process(
    COMMAND ${CTITAN_PYTHON} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE CTITAN_TORCH_PREFIX OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE CTITAN_TORCH_QUERY)
  if(NOT CTITAN_TORCH_QUERY EQUAL 0)
    message(FATAL_ERROR "${CTITAN_PYTHON} cannot import torch; run scripts/setup_venv.sh or pass "
                        "-DCMAKE_PREFIX_PATH=/path/to/libtorch")
  endif()
  # Appended, so that a libtorch the user named in CMAKE_PREFIX_PATH still wins.
  list(APPEND CMAKE_PREFIX_PATH ${CTITAN_TORCH_PREFIX})
endif()

# A CUDA libtorch's config probes the local GPUs to pick architectures, with a try_run that
# CMake 3.25 cannot build in C++20 mode; ctitan compiles no .cu files, and the machines that build
# it may have no GPU. Name the architectures instead (Ampere, Hopper, Blackwell), unless the user did.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0;10.0")
endif()
