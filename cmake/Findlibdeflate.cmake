# Debian's libdeflate-dev ships no CMake package: find its library and header and make the
# imported target libdeflate::libdeflate (commlens' build, and its installed package for those
# linking commlens' static libraries).
find_library(LIBDEFLATE_LIBRARY deflate)
find_path(LIBDEFLATE_INCLUDE_DIR libdeflate.h)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(libdeflate REQUIRED_VARS LIBDEFLATE_LIBRARY LIBDEFLATE_INCLUDE_DIR)
if(libdeflate_FOUND AND NOT TARGET libdeflate::libdeflate)
  add_library(libdeflate::libdeflate UNKNOWN IMPORTED)
  set_target_properties(libdeflate::libdeflate PROPERTIES IMPORTED_LOCATION "${LIBDEFLATE_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${LIBDEFLATE_INCLUDE_DIR}")
endif()
