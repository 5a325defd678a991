# install_dirs.cmake: where an install puts each part, and the relative paths that make the
# install relocatable (programs find their libraries, helpers and the MPI module relative to
# themselves, never by absolute path).
include(GNUInstallDirs)

set(XSPAWN_INSTALL_HELPERDIR "${CMAKE_INSTALL_LIBEXECDIR}/xspawn")  # xspawn-train, benches
set(XSPAWN_INSTALL_MODULEDIR "${CMAKE_INSTALL_LIBDIR}/xspawn")      # libxspawn_mpi.so
set(XSPAWN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/xspawn")
# The Python package xspawn/ goes in a directory of its own (so that putting it on PYTHONPATH
# brings nothing else along), and xspawn.pth in Debian python3's site directory points there:
# from the .deb (prefix /usr) Debian's python3 imports it as it is; under another prefix
# `xspawn run` finds it by itself, other programs need PYTHONPATH=<prefix>/lib/xspawn/python.
set(XSPAWN_INSTALL_PYTHONDIR "${XSPAWN_INSTALL_MODULEDIR}/python")
set(XSPAWN_INSTALL_PTHDIR "lib/python3/dist-packages")

function(xspawn_relative out from to)
  file(RELATIVE_PATH rel "/prefix/${from}" "/prefix/${to}")
  if(rel STREQUAL "")
    set(rel ".")
  endif()
  set(${out} "${rel}" PARENT_SCOPE)
endfunction()

# Seen from the installed `xspawn` (bin/): its helpers and its MPI module.
xspawn_relative(XSPAWN_BIN_TO_HELPERS "${CMAKE_INSTALL_BINDIR}" "${XSPAWN_INSTALL_HELPERDIR}")
xspawn_relative(XSPAWN_BIN_TO_MODULES "${CMAKE_INSTALL_BINDIR}" "${XSPAWN_INSTALL_MODULEDIR}")
# RPATHs: programs in bin/ and libexec/xspawn/, the MPI module, and the libraries themselves.
xspawn_relative(_bin_to_lib "${CMAKE_INSTALL_BINDIR}" "${CMAKE_INSTALL_LIBDIR}")
xspawn_relative(_helper_to_lib "${XSPAWN_INSTALL_HELPERDIR}" "${CMAKE_INSTALL_LIBDIR}")
xspawn_relative(_module_to_lib "${XSPAWN_INSTALL_MODULEDIR}" "${CMAKE_INSTALL_LIBDIR}")
xspawn_relative(_python_to_lib "${XSPAWN_INSTALL_PYTHONDIR}/xspawn" "${CMAKE_INSTALL_LIBDIR}")
set(XSPAWN_RPATH_BIN "$ORIGIN/${_bin_to_lib}")
set(XSPAWN_RPATH_HELPER "$ORIGIN/${_helper_to_lib}")
set(XSPAWN_RPATH_MODULE "$ORIGIN/${_module_to_lib}")
set(XSPAWN_RPATH_PYTHON "$ORIGIN/${_python_to_lib}")
set(CMAKE_INSTALL_RPATH "$ORIGIN")  # libraries find each other beside themselves

# The libraries a program of ours links are shared, exported as xspawn::<name>.
function(xspawn_library target export_name)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name}
    VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  install(TARGETS ${target} EXPORT xspawnTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()

# A helper program the launcher runs (installed to libexec/xspawn).
function(xspawn_helper target)
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${XSPAWN_RPATH_HELPER}")
  install(TARGETS ${target} RUNTIME DESTINATION ${XSPAWN_INSTALL_HELPERDIR} COMPONENT runtime)
endfunction()
