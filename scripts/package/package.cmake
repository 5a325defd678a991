# package.cmake: what `cmake --install` adds besides the programs, libraries and headers (the
# CMake package xspawnConfig.cmake with its version file, exporting xspawn::xspawn and one
# target per library; a pkg-config file), and `cpack -G DEB`, the Debian package.
include(CMakePackageConfigHelpers)

install(EXPORT xspawnTargets NAMESPACE xspawn:: DESTINATION ${XSPAWN_INSTALL_CMAKEDIR} COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/xspawnConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/xspawnConfig.cmake INSTALL_DESTINATION ${XSPAWN_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/xspawnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/xspawnConfig.cmake ${CMAKE_BINARY_DIR}/package/xspawnConfigVersion.cmake
  DESTINATION ${XSPAWN_INSTALL_CMAKEDIR} COMPONENT dev)

# pkg-config: the prefix is found from the .pc file's own place, so the install stays relocatable.
set(XSPAWN_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
xspawn_relative(XSPAWN_PC_TO_PREFIX "${XSPAWN_PKGCONFIGDIR}" "")
configure_file(${CMAKE_CURRENT_LIST_DIR}/xspawn.pc.in ${CMAKE_BINARY_DIR}/package/xspawn.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/xspawn.pc DESTINATION ${XSPAWN_PKGCONFIGDIR} COMPONENT dev)

# The Debian package: everything above in one .deb; dpkg-shlibdeps finds the libraries' own
# dependencies, the headers add libfmt-dev (xspawn.hpp formats with fmt).
set(CPACK_PACKAGE_NAME xspawn)
set(CPACK_PACKAGE_VENDOR "xspawn")
set(CPACK_PACKAGE_CONTACT "xspawn maintainers <xspawn@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libfmt-dev")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "dataset-fashion-mnist, openmpi-bin")
if(XSPAWN_PYTHON_MODULE)  # the module is built for one CPython (its ABI), and takes NumPy arrays
  string(REPLACE "." ";" _v "${XSPAWN_PYTHON_VERSION}")
  list(GET _v 0 _major)
  list(GET _v 1 _minor)
  math(EXPR _next "${_minor} + 1")
  string(APPEND CPACK_DEBIAN_PACKAGE_RECOMMENDS
    ", python3 (>= ${XSPAWN_PYTHON_VERSION}), python3 (<< ${_major}.${_next}), python3-numpy")
endif()
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "${PROJECT_DESCRIPTION}
 xspawn forks N worker processes, one per emulated accelerator core, that meet at named
 shared-memory rendezvous points and all-reduce their gradients over shared memory, as
 PyTorch/XLA's xmp.spawn does on a TPU. This package holds the xspawn command, its helper
 programs, the libraries, the C++ headers, a CMake package, a pkg-config file and the xspawn
 Python module (import xspawn; xspawn.torch for PyTorch DDP).")
set(CPACK_GENERATOR DEB)
include(CPack)
