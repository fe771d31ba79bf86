# Install rules: headers, liblaggard.a (laggard::core) and liblaggard.so (laggard::shared), with
# MPI also liblaggard_mpi.a/.so (laggard::mpi, laggard::mpi_shared), the `laggard` program, a
# CMake package (find_package(laggard)) and pkg-config files (laggard.pc, laggard-mpi.pc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(laggard_core PROPERTIES EXPORT_NAME core)
set_target_properties(laggard_shared PROPERTIES EXPORT_NAME shared)
set(laggard_libraries laggard_core laggard_shared)
if(LAGGARD_HAVE_MPI)
  set_target_properties(laggard_mpi PROPERTIES EXPORT_NAME mpi)
  set_target_properties(laggard_mpi_shared PROPERTIES EXPORT_NAME mpi_shared)
  list(APPEND laggard_libraries laggard_mpi laggard_mpi_shared)
endif()

install(TARGETS ${laggard_libraries}
  EXPORT laggardTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS laggard_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/laggard
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/laggard/version.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/laggard)

set(LAGGARD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/laggard)
install(EXPORT laggardTargets NAMESPACE laggard:: DESTINATION ${LAGGARD_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/laggardConfig.cmake.in
  ${PROJECT_BINARY_DIR}/laggardConfig.cmake
  INSTALL_DESTINATION ${LAGGARD_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/laggardConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)  # 0.x: a minor release may change the API
install(FILES ${PROJECT_BINARY_DIR}/laggardConfig.cmake ${PROJECT_BINARY_DIR}/laggardConfigVersion.cmake
  DESTINATION ${LAGGARD_CMAKE_DIR})

# pkg-config: relocatable (the prefix is found from the .pc file's own place).
file(RELATIVE_PATH LAGGARD_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" LAGGARD_PC_TO_PREFIX "${LAGGARD_PC_TO_PREFIX}")
set(LAGGARD_PC_REQUIRES_PRIVATE "simdjson zlib")
set(LAGGARD_PC_LIBS_PRIVATE "-pthread")
if(CMAKE_DL_LIBS)
  string(APPEND LAGGARD_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/laggard.pc.in ${PROJECT_BINARY_DIR}/laggard.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/laggard.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(LAGGARD_HAVE_MPI)
  # The MPI flags come from MPI's own pkg-config module when it has one (Open MPI: ompi-c).
  set(LAGGARD_PC_MPI_REQUIRES "")
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    foreach(m ompi-c mpich mpi)
      execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --exists ${m} RESULT_VARIABLE rc)
      if(rc EQUAL 0)
        set(LAGGARD_PC_MPI_REQUIRES ${m})
        break()
      endif()
    endforeach()
  endif()
  configure_file(${CMAKE_CURRENT_LIST_DIR}/laggard-mpi.pc.in ${PROJECT_BINARY_DIR}/laggard-mpi.pc
    @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/laggard-mpi.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
