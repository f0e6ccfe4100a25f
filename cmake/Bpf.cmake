# BPF build: CO-RE .bpf.c --clang -target bpf--> .tmp.o --bpftool gen object (link, strip)-->
# stallwatch.bpf.o --bpftool gen skeleton--> stallwatch.skel.h, all under the build tree.
#
# vmlinux.h is generated at build time from the build host's kernel BTF (see docs/bpf.md for
# why it is not vendored). Point STALLWATCH_VMLINUX_BTF at another BTF file to build elsewhere.

find_program(CLANG_BPF NAMES clang clang-16 clang-15 clang-14 REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)

set(STALLWATCH_VMLINUX_BTF "/sys/kernel/btf/vmlinux" CACHE FILEPATH
    "Kernel BTF from which bpf vmlinux.h is generated")
if(NOT EXISTS "${STALLWATCH_VMLINUX_BTF}")
  message(FATAL_ERROR
    "kernel BTF not found at ${STALLWATCH_VMLINUX_BTF}: build on a kernel with "
    "CONFIG_DEBUG_INFO_BTF=y or pass -DSTALLWATCH_VMLINUX_BTF=/path/to/vmlinux")
endif()

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(BPF_TARGET_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(BPF_TARGET_ARCH arm64)
else()
  message(FATAL_ERROR "unsupported architecture ${CMAKE_SYSTEM_PROCESSOR} for BPF")
endif()

set(BPF_OUT "${CMAKE_BINARY_DIR}/bpf")
file(MAKE_DIRECTORY "${BPF_OUT}")

add_custom_command(
  OUTPUT "${BPF_OUT}/vmlinux.h"
  COMMAND "${BPFTOOL}" btf dump file "${STALLWATCH_VMLINUX_BTF}" format c > "${BPF_OUT}/vmlinux.h"
  DEPENDS "${STALLWATCH_VMLINUX_BTF}"
  COMMENT "Generating vmlinux.h from ${STALLWATCH_VMLINUX_BTF}"
  VERBATIM)
# One target drives that command: every skeleton depends on it, so that parallel skeleton builds
# (the daemon's, the probe-cost measure's, the tests') never write vmlinux.h at the same time,
# and one in another directory finds it made.
add_custom_target(stallwatch_bpf_vmlinux DEPENDS "${BPF_OUT}/vmlinux.h")

# stallwatch_bpf_skeleton(NAME SOURCES...): links the sources into one object, makes NAME.skel.h
function(stallwatch_bpf_skeleton name)
  set(objects)
  set(werror)
  if(STALLWATCH_WERROR)
    set(werror -Werror)  # as for the C++ (CMakeLists.txt): development and CI only
  endif()
  file(GLOB bpf_headers "${CMAKE_SOURCE_DIR}/bpf/*.h")
  foreach(src IN LISTS ARGN)
    get_filename_component(stem "${src}" NAME_WE)
    set(obj "${BPF_OUT}/${stem}.tmp.o")
    add_custom_command(
      OUTPUT "${obj}"
      COMMAND "${CLANG_BPF}" -g -O2 -Wall ${werror} -target bpf -D__TARGET_ARCH_${BPF_TARGET_ARCH}
              -I "${BPF_OUT}" -I "${CMAKE_SOURCE_DIR}/bpf" -c "${src}" -o "${obj}"
      DEPENDS "${src}" ${bpf_headers} "${BPF_OUT}/vmlinux.h"
      COMMENT "BPF ${stem}.bpf.c"
      VERBATIM)
    list(APPEND objects "${obj}")
  endforeach()
  add_custom_command(
    OUTPUT "${BPF_OUT}/${name}.bpf.o" "${BPF_OUT}/${name}.skel.h"
    COMMAND "${BPFTOOL}" gen object "${BPF_OUT}/${name}.bpf.o" ${objects}
    COMMAND "${BPFTOOL}" gen skeleton "${BPF_OUT}/${name}.bpf.o" name "${name}_bpf"
            > "${BPF_OUT}/${name}.skel.h"
    DEPENDS ${objects}
    COMMENT "BPF skeleton ${name}.skel.h"
    VERBATIM)
  add_custom_target(${name}_skel DEPENDS "${BPF_OUT}/${name}.skel.h")
  add_dependencies(${name}_skel stallwatch_bpf_vmlinux)
endfunction()
