# Apache Arrow's C++ Parquet reader (data/parquet_documents.cpp), taken from the pyarrow wheel of
# CTITAN_PYTHON: the wheel ships libarrow, libparquet and their headers, built with the same C++
# ABI as the torch wheel. Sets CTITAN_ARROW_INCLUDE_DIR and CTITAN_ARROW_LIBRARIES.
# -DCTITAN_WITH_ARROW=OFF builds without it: Parquet datasets are then refused with one line that
# says so (the GPU bundle does this: libarrow alone is 48 MB of the 64 MiB a run may carry).
option(CTITAN_WITH_ARROW "Read Parquet datasets through Apache Arrow (the pyarrow wheel's C++ libraries)" ON)
if(CTITAN_WITH_ARROW)
  if(CTITAN_PYTHON)
    execute_process(
      COMMAND ${CTITAN_PYTHON} -c "import pyarrow as pa; print(pa.get_include()); print(pa.get_library_dirs()[0]); print(pa.__version__)"
      OUTPUT_VARIABLE CTITAN_PYARROW_QUERY OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE CTITAN_PYARROW_RESULT ERROR_QUIET)
  endif()
  if(NOT CTITAN_PYTHON OR NOT CTITAN_PYARROW_RESULT EQUAL 0)
    message(FATAL_ERROR "ctitan: CTITAN_WITH_ARROW needs pyarrow in CTITAN_PYTHON ('${CTITAN_PYTHON}'): "
                        "run scripts/setup_venv.sh, or pass -DCTITAN_WITH_ARROW=OFF to build without Parquet")
  endif()
  string(REPLACE "\n" ";" CTITAN_PYARROW_QUERY "${CTITAN_PYARROW_QUERY}")
  list(GET CTITAN_PYARROW_QUERY 0 CTITAN_ARROW_INCLUDE_DIR)
  list(GET CTITAN_PYARROW_QUERY 1 CTITAN_ARROW_LIBRARY_DIR)
  list(GET CTITAN_PYARROW_QUERY 2 CTITAN_PYARROW_VERSION)
  # The wheel names its libraries by ABI version only (libarrow.so.2600), with no unversioned link.
  file(GLOB CTITAN_ARROW_LIBRARY "${CTITAN_ARROW_LIBRARY_DIR}/libarrow.so.[0-9]*")
  file(GLOB CTITAN_PARQUET_LIBRARY "${CTITAN_ARROW_LIBRARY_DIR}/libparquet.so.[0-9]*")
  list(FILTER CTITAN_ARROW_LIBRARY INCLUDE REGEX "\\.so\\.[0-9]+$")
  list(FILTER CTITAN_PARQUET_LIBRARY INCLUDE REGEX "\\.so\\.[0-9]+$")
  if(NOT CTITAN_ARROW_LIBRARY OR NOT CTITAN_PARQUET_LIBRARY OR NOT EXISTS "${CTITAN_ARROW_INCLUDE_DIR}/parquet/api/reader.h")
    message(FATAL_ERROR "ctitan: pyarrow ${CTITAN_PYARROW_VERSION} in ${CTITAN_ARROW_LIBRARY_DIR} lacks libarrow, "
                        "libparquet or the Parquet headers; pass -DCTITAN_WITH_ARROW=OFF to build without Parquet")
  endif()
  set(CTITAN_ARROW_LIBRARIES ${CTITAN_PARQUET_LIBRARY} ${CTITAN_ARROW_LIBRARY})
  message(STATUS "ctitan: Parquet through pyarrow ${CTITAN_PYARROW_VERSION}'s Arrow C++ (${CTITAN_ARROW_LIBRARY_DIR})")
else()
  message(STATUS "ctitan: Parquet not compiled in (CTITAN_WITH_ARROW=OFF)")
endif()
