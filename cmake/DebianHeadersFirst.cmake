# The torch wheel's include directory carries its own fmt (v12) headers, and it is searched
# before /usr/include. ctitan links Debian's libfmt and libspdlog (built against fmt 9), so their
# headers must win: a directory of links to them goes first on the include path (-I precedes the
# -isystem directories of imported targets). No public libtorch header ctitan includes uses fmt.
function(ctitan_debian_headers_first target)
  set(dir ${CMAKE_BINARY_DIR}/debian_headers_first)
  file(MAKE_DIRECTORY ${dir})
  foreach(lib fmt spdlog)
    if(EXISTS /usr/include/${lib} AND NOT EXISTS ${dir}/${lib})
      file(CREATE_LINK /usr/include/${lib} ${dir}/${lib} SYMBOLIC)
    endif()
  endforeach()
  # Installed too (cmake/Install.cmake): programs built on the installed library need the same order.
  target_include_directories(${target} BEFORE PUBLIC $<BUILD_INTERFACE:${dir}>
                                                     $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/ctitan_debian_headers_first>)
endfunction()
