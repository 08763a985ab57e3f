# `cmake --install build --prefix DIR` installs ctitan as a library: headers, libctitan_core.a, the
# ctitan binary, and a CMake package, so that another project can write
#   find_package(ctitan REQUIRED)  target_link_libraries(app PRIVATE ctitan::ctitan)
# (examples/custom_loop does; tests/install_test.cpp builds it against an installed copy).
include(CMakePackageConfigHelpers)
set(CTITAN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ctitan)

install(TARGETS ctitan_core EXPORT ctitanTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS ctitan RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET ctitan_cuda)  # beside bin/ as the build tree has it: cuda_module.cpp looks there
  install(TARGETS ctitan_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/src/ctitan DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
# The links that put Debian's fmt/spdlog headers ahead of the torch wheel's bundled fmt.
install(DIRECTORY ${CMAKE_BINARY_DIR}/debian_headers_first/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ctitan_debian_headers_first)
install(EXPORT ctitanTargets NAMESPACE ctitan:: DESTINATION ${CTITAN_CMAKE_DIR})
install(FILES ${CMAKE_SOURCE_DIR}/cmake/TorchWheelLinking.cmake DESTINATION ${CTITAN_CMAKE_DIR})

# The libtorch ctitan was built with: a program must use the same one (C++ ABI, version).
set(CTITAN_TORCH_DIR ${Torch_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/ctitanConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/ctitanConfig.cmake INSTALL_DESTINATION ${CTITAN_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ctitanConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ctitanConfig.cmake ${CMAKE_BINARY_DIR}/ctitanConfigVersion.cmake
        DESTINATION ${CTITAN_CMAKE_DIR})
