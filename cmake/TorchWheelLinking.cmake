# A CUDA torch wheel's libtorch_cuda.so needs the CUDA, cuDNN and NCCL libraries of the nvidia-*
# wheels next to it (site-packages/nvidia/*/lib), found at run time through its $ORIGIN RUNPATH.
# The linker does not expand $ORIGIN, and would otherwise resolve them from the system's CUDA
# toolkit (an older NCCL that lacks symbols libtorch uses): point it at the wheels' copies, and
# give our binaries the same directories at run time.
get_filename_component(CTITAN_TORCH_ROOT "${TORCH_INSTALL_PREFIX}" ABSOLUTE)
file(GLOB CTITAN_NVIDIA_WHEEL_LIBS LIST_DIRECTORIES true "${CTITAN_TORCH_ROOT}/../nvidia/*/lib")
if(CTITAN_NVIDIA_WHEEL_LIBS)
  foreach(dir ${CTITAN_NVIDIA_WHEEL_LIBS})
    add_link_options("LINKER:-rpath-link,${dir}")
  endforeach()
  list(APPEND CMAKE_BUILD_RPATH ${CTITAN_NVIDIA_WHEEL_LIBS})
  list(APPEND CMAKE_INSTALL_RPATH ${CTITAN_NVIDIA_WHEEL_LIBS})
endif()
