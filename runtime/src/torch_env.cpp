// torch_env.cpp: torchrun's worker environment (see torch_env.hpp).
#include "torch_env.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "xspawn/error.hpp"

namespace xs::detail {

MasterPort::~MasterPort() {
  if (fd_ >= 0) ::close(fd_);
}

void MasterPort::reserve(const std::string& addr) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  XS_CHECK(fd_ >= 0, SystemError, fmt::format("socket() for MASTER_PORT: {}", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;  // the kernel picks a free one
  XS_CHECK(::inet_pton(AF_INET, addr.c_str(), &a.sin_addr) == 1, UsageError,
           fmt::format("MASTER_ADDR {}: not an IPv4 address", addr));
  socklen_t len = sizeof a;
  XS_CHECK(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
               ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0,
           SystemError,
           fmt::format("cannot reserve a TCP port on {} for MASTER_PORT ({}); free some ports or set MASTER_PORT",
                       addr, std::strerror(errno)));
  port_ = ntohs(a.sin_port);
}

void setTorchEnv(const TorchPlace& p) {
  auto set = [](const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); };
  set("RANK", std::to_string(p.rank));
  set("LOCAL_RANK", std::to_string(p.localRank));
  set("WORLD_SIZE", std::to_string(p.world));
  set("LOCAL_WORLD_SIZE", std::to_string(p.localWorld));
  set("GROUP_RANK", std::to_string(p.machine));
  set("GROUP_WORLD_SIZE", std::to_string(p.machines));
  set("ROLE_NAME", "default");
  set("ROLE_RANK", std::to_string(p.rank));
  set("ROLE_WORLD_SIZE", std::to_string(p.world));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(p.restartCount));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(p.maxRestarts));
  set("TORCHELASTIC_RUN_ID", p.runId);
  set("TORCHELASTIC_USE_AGENT_STORE", "False");  // rank 0 hosts the store, as with env://
  if (!p.masterAddr.empty()) {
    set("MASTER_ADDR", p.masterAddr);
    set("MASTER_PORT", std::to_string(p.masterPort));
  }
  if (!p.pythonDir.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    set("PYTHONPATH", old && *old ? p.pythonDir + ":" + old : p.pythonDir);
  }
}

std::string pythonPackageDir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&pythonPackageDir), &info) == 0 || !info.dli_fname) return {};
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path lib = fs::canonical(info.dli_fname, ec).parent_path();
  if (ec) return {};
  for (const char* rel : {XSPAWN_LIB_TO_PYTHON, XSPAWN_BUILDLIB_TO_PYTHON}) {  // installed, build tree
    const fs::path dir = (lib / rel).lexically_normal();
    if (fs::exists(dir / "xspawn" / "__init__.py", ec)) return dir.string();
  }
  return {};
}

}  // namespace xs::detail
