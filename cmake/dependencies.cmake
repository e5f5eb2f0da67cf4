# Every dependency comes from a Debian package (scripts/install-deps.sh installs them all).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(cppzmq REQUIRED)            # brings libzmq as target libzmq
find_package(Boost 1.74 REQUIRED)        # header-only parts: Asio, Beast
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_package(prometheus-cpp CONFIG REQUIRED)  # prometheus-cpp-dev: metrics and their text exposition

if(HOTCOLD_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(benchmark REQUIRED)
  find_package(ZLIB REQUIRED)           # the dashboard test reads the browser's PNG screenshot
endif()

# CAF 0.17 (libcaf-dev) ships no CMake config: declare its imported targets here.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
find_library(CAF_OPENSSL_LIBRARY caf_openssl REQUIRED)
find_package(OpenSSL 1.1 REQUIRED)     # libssl-dev: stage links' TLS (CAF's module) and hotcold keygen --tls
if(NOT TARGET CAF::core)
  add_library(CAF::core SHARED IMPORTED)
  set_target_properties(CAF::core PROPERTIES
    IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
  add_library(CAF::io SHARED IMPORTED)
  set_target_properties(CAF::io PROPERTIES
    IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
    INTERFACE_LINK_LIBRARIES CAF::core)
  add_library(CAF::openssl SHARED IMPORTED)
  set_target_properties(CAF::openssl PROPERTIES
    IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
    INTERFACE_LINK_LIBRARIES "CAF::io;OpenSSL::SSL")
endif()

# Line editing for `hotcold chat`: libedit's readline-compatible API.
pkg_check_modules(LIBEDIT REQUIRED IMPORTED_TARGET libedit)

# io_uring for the disk tier's reads (engine/disk_reads).
pkg_check_modules(LIBURING REQUIRED IMPORTED_TARGET liburing)
