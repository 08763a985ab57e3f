# Apache Arrow's C++ Parquet reader (data/parquet_documents.cpp). CTITAN_ARROW_ROOT is a folder
# holding include/ (arrow/, parquet/) and libarrow.so.N, libparquet.so.N: the pyarrow package's
# folder, whose wheel ships exactly that, built with the torch wheel's C++ ABI. Left empty, it is
# found from CTITAN_PYTHON's pyarrow (the venv of scripts/setup_venv.sh); a build with its own
# libtorch and no venv names it: -DCTITAN_ARROW_ROOT=/path/to/site-packages/pyarrow.
# Sets CTITAN_ARROW_INCLUDE_DIR and CTITAN_ARROW_LIBRARIES. The libraries are linked by their
# full paths, and so is an installed libctitan_core.a's package (cmake/Install.cmake): a program
# built against it uses that pyarrow's libparquet, as it uses that venv's libtorch.
# -DCTITAN_WITH_ARROW=OFF builds without it: Parquet datasets are then refused with one line that
# says so (the GPU bundle does this: libarrow alone is 48 MB of the 64 MiB a run may carry).
option(CTITAN_WITH_ARROW "Read Parquet datasets through Apache Arrow (the pyarrow wheel's C++ libraries)" ON)
set(CTITAN_ARROW_ROOT "" CACHE PATH "Arrow C++ headers and libraries (the pyarrow package folder); empty: CTITAN_PYTHON's")
if(CTITAN_WITH_ARROW)
  # Found from a Python that has changed since (another venv): found again, so that the headers
  # and libraries stay those of the pyarrow beside the build's torch.
  # A root the user named (not the one found) is kept.
  if(CTITAN_ARROW_ROOT_FOUND AND CTITAN_ARROW_ROOT STREQUAL CTITAN_ARROW_ROOT_FOUND
     AND NOT CTITAN_ARROW_ROOT_FROM_PYTHON STREQUAL "${CTITAN_PYTHON}")
    set(CTITAN_ARROW_ROOT "" CACHE PATH "" FORCE)
  endif()
  if(NOT CTITAN_ARROW_ROOT AND CTITAN_PYTHON)
    execute_process(
      COMMAND ${CTITAN_PYTHON} -c "import os, pyarrow; print(os.path.dirname(pyarrow.__file__))"
      OUTPUT_VARIABLE CTITAN_PYARROW_DIR OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE CTITAN_PYARROW_RESULT ERROR_QUIET)
    if(CTITAN_PYARROW_RESULT EQUAL 0)
      set(CTITAN_ARROW_ROOT ${CTITAN_PYARROW_DIR} CACHE PATH "" FORCE)
      set(CTITAN_ARROW_ROOT_FROM_PYTHON ${CTITAN_PYTHON} CACHE INTERNAL "the Python CTITAN_ARROW_ROOT was found from")
      set(CTITAN_ARROW_ROOT_FOUND ${CTITAN_PYARROW_DIR} CACHE INTERNAL "the CTITAN_ARROW_ROOT found from it")
    endif()
  endif()
  if(NOT CTITAN_ARROW_ROOT)
    message(FATAL_ERROR "ctitan: CTITAN_WITH_ARROW needs Arrow C++: pyarrow in CTITAN_PYTHON ('${CTITAN_PYTHON}', "
                        "see scripts/setup_venv.sh) or -DCTITAN_ARROW_ROOT=/path/to/site-packages/pyarrow; "
                        "-DCTITAN_WITH_ARROW=OFF builds without Parquet")
  endif()
  set(CTITAN_ARROW_INCLUDE_DIR ${CTITAN_ARROW_ROOT}/include)
  # The wheel names its libraries by ABI version only (libarrow.so.2600), with no unversioned link.
  file(GLOB CTITAN_ARROW_LIBRARY "${CTITAN_ARROW_ROOT}/libarrow.so.[0-9]*")
  file(GLOB CTITAN_PARQUET_LIBRARY "${CTITAN_ARROW_ROOT}/libparquet.so.[0-9]*")
  list(FILTER CTITAN_ARROW_LIBRARY INCLUDE REGEX "\\.so\\.[0-9]+$")
  list(FILTER CTITAN_PARQUET_LIBRARY INCLUDE REGEX "\\.so\\.[0-9]+$")
  if(NOT CTITAN_ARROW_LIBRARY OR NOT CTITAN_PARQUET_LIBRARY OR NOT EXISTS "${CTITAN_ARROW_INCLUDE_DIR}/parquet/api/reader.h")
    message(FATAL_ERROR "ctitan: ${CTITAN_ARROW_ROOT} lacks libarrow.so.N, libparquet.so.N or include/parquet/api/reader.h; "
                        "-DCTITAN_WITH_ARROW=OFF builds without Parquet")
  endif()
  set(CTITAN_ARROW_LIBRARIES ${CTITAN_PARQUET_LIBRARY} ${CTITAN_ARROW_LIBRARY})
  message(STATUS "ctitan: Parquet through Arrow C++ in ${CTITAN_ARROW_ROOT}")
else()
  message(STATUS "ctitan: Parquet not compiled in (CTITAN_WITH_ARROW=OFF)")
endif()
