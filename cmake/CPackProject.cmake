# Read by cpack before it packages (CPACK_PROJECT_CONFIG_FILE), and once at configure time by
# cmake/Package.cmake: the package's version and its Debian changelog are the commit's being
# packaged, not the last configure's, so `cpack` in a build directory configured before the
# latest commits still names the package as `stallwatch version` (regenerated at every build)
# prints it.
set(STALLWATCH_GIT_VERSION_FUNCTION_ONLY ON)
include("${CPACK_STALLWATCH_SOURCE_DIR}/cmake/GitVersion.cmake")
stallwatch_git_version("${CPACK_STALLWATCH_BASE_VERSION}" "${CPACK_STALLWATCH_SOURCE_DIR}"
                       _sw_version _sw_revision)
set(CPACK_PACKAGE_VERSION "${_sw_version}")
execute_process(COMMAND git log -1 --format=%aD WORKING_DIRECTORY "${CPACK_STALLWATCH_SOURCE_DIR}"
  OUTPUT_VARIABLE _sw_date OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT _sw_date)
  set(_sw_date "Tue, 24 Nov 2026 00:00:00 +0000")
endif()
file(WRITE "${CPACK_STALLWATCH_GENERATED}/changelog"
  "stallwatch (${_sw_version}) unstable; urgency=medium\n\n"
  "  * Built from git revision ${_sw_revision}.\n\n"
  " -- stallwatch developers <stallwatch@example.org>  ${_sw_date}\n")
execute_process(COMMAND gzip -9nf "${CPACK_STALLWATCH_GENERATED}/changelog")
