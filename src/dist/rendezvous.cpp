#include "dist/rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "core/error.h"

namespace attnlab {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

// Owns a socket descriptor.
struct Socket {
  int fd = -1;
  explicit Socket(int f = -1) : fd(f) {}
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
  Socket(Socket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Socket& operator=(Socket&&) = delete;
};

// Waits until fd is readable (events = POLLIN) or writable; false at the deadline.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const double left = seconds_left(deadline);
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, int(std::min(left * 1e3 + 1, 1e6)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) ATTN_FAIL("rendezvous: poll failed: %s", std::strerror(errno));
  }
}

void send_all(int fd, const void* data, size_t n, const char* what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    ATTN_REQUIRE(k > 0, "rendezvous: sending %s failed: %s", what, std::strerror(errno));
    p += k;
    n -= size_t(k);
  }
}

void recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const char* what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ATTN_REQUIRE(wait_fd(fd, POLLIN, deadline), "rendezvous: timed out receiving %s", what);
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    ATTN_REQUIRE(k > 0, "rendezvous: the peer closed the connection while sending %s", what);
    p += k;
    n -= size_t(k);
  }
}

std::string serve(const std::string& blob, int world_size, int port, double timeout_s) {
  Socket ls(::socket(AF_INET6, SOCK_STREAM, 0));
  bool v6 = ls.fd >= 0;
  if (!v6) ls.fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ATTN_REQUIRE(ls.fd >= 0, "rendezvous: socket() failed: %s", std::strerror(errno));
  const int one = 1, zero = 0;
  ::setsockopt(ls.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc;
  if (v6) {
    ::setsockopt(ls.fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // IPv4 too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(uint16_t(port));
    rc = ::bind(ls.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port));
    rc = ::bind(ls.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  ATTN_REQUIRE(rc == 0 && ::listen(ls.fd, 128) == 0,
               "rendezvous: rank 0 cannot listen on port %d (MASTER_PORT): %s", port,
               std::strerror(errno));
  const auto deadline = deadline_after(timeout_s);
  std::vector<bool> seen(size_t(world_size), false);
  const uint32_t len = uint32_t(blob.size());
  for (int joined = 1; joined < world_size;) {
    ATTN_REQUIRE(wait_fd(ls.fd, POLLIN, deadline),
                 "rendezvous: rank 0 waited %g s on port %d (distributed.timeout_s) and %d of %d "
                 "ranks connected; check that every rank runs and reaches MASTER_ADDR:MASTER_PORT",
                 timeout_s, port, joined, world_size);
    Socket c(::accept(ls.fd, nullptr, nullptr));
    if (c.fd < 0) continue;
    int32_t r = -1;
    recv_all(c.fd, &r, sizeof(r), deadline, "a rank number");
    ATTN_REQUIRE(r >= 1 && r < world_size && !seen[size_t(r)],
                 "rendezvous: rank 0 got a connection from rank %d (expected each of 1..%d once)",
                 r, world_size - 1);
    seen[size_t(r)] = true;
    send_all(c.fd, &len, sizeof(len), "the blob length");
    send_all(c.fd, blob.data(), blob.size(), "the blob");
    ++joined;
  }
  return blob;
}

std::string join(int rank, const std::string& addr, int port, double timeout_s) {
  const auto deadline = deadline_after(timeout_s);
  const std::string service = std::to_string(port);
  std::string last_error = "no attempt";
  while (seconds_left(deadline) > 0) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int g = ::getaddrinfo(addr.c_str(), service.c_str(), &hints, &res);
    ATTN_REQUIRE(g == 0, "rendezvous: cannot resolve MASTER_ADDR '%s': %s", addr.c_str(),
                 gai_strerror(g));
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      Socket c(::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol));
      if (c.fd < 0) continue;
      if (::connect(c.fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        last_error = std::strerror(errno);
        continue;
      }
      ::freeaddrinfo(res);
      const int32_t r = rank;
      send_all(c.fd, &r, sizeof(r), "the rank number");
      uint32_t len = 0;
      recv_all(c.fd, &len, sizeof(len), deadline, "the blob length");
      ATTN_REQUIRE(len <= (1u << 20), "rendezvous: rank 0 announced a %u-byte blob", len);
      std::string blob(len, '\0');
      recv_all(c.fd, blob.data(), len, deadline, "the blob");
      return blob;
    }
    ::freeaddrinfo(res);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ATTN_FAIL(
      "rendezvous: rank %d could not reach rank 0 at %s:%d within %g s "
      "(distributed.timeout_s; last error: %s); check MASTER_ADDR, MASTER_PORT and that "
      "rank 0 runs",
      rank, addr.c_str(), port, timeout_s, last_error.c_str());
}

}  // namespace

std::string tcp_rendezvous(const std::string& blob, int rank, int world_size,
                           const std::string& addr, int port, double timeout_s) {
  ATTN_REQUIRE(world_size >= 1 && rank >= 0 && rank < world_size,
               "rendezvous: rank %d outside [0, %d)", rank, world_size);
  ATTN_REQUIRE(port > 0 && port < 65536, "rendezvous: MASTER_PORT must be in [1, 65535], got %d",
               port);
  if (world_size == 1) return blob;
  if (rank == 0) return serve(blob, world_size, port, timeout_s);
  ATTN_REQUIRE(!addr.empty(), "rendezvous: MASTER_ADDR is empty (rank %d must reach rank 0)", rank);
  return join(rank, addr, port, timeout_s);
}

std::string file_rendezvous(const std::string& blob, int rank, const std::string& path,
                            double timeout_s) {
  namespace fs = std::filesystem;
  ATTN_REQUIRE(!path.empty(), "rendezvous: the file path is empty");
  if (rank == 0) {
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      ATTN_REQUIRE(f.good(), "rendezvous: rank 0 cannot write '%s'", tmp.c_str());
      f.write(blob.data(), std::streamsize(blob.size()));
      ATTN_REQUIRE(f.good(), "rendezvous: rank 0 failed writing '%s'", tmp.c_str());
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    ATTN_REQUIRE(!ec, "rendezvous: rank 0 cannot rename '%s' to '%s': %s", tmp.c_str(),
                 path.c_str(), ec.message().c_str());
    return blob;
  }
  const auto deadline = deadline_after(timeout_s);
  while (seconds_left(deadline) > 0) {
    std::ifstream f(path, std::ios::binary);
    if (f.good()) {
      std::ostringstream s;
      s << f.rdbuf();
      return s.str();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ATTN_FAIL(
      "rendezvous: rank %d waited %g s (distributed.timeout_s) for rank 0 to write '%s' "
      "(distributed.rendezvous_file); is it on a file system every rank shares?",
      rank, timeout_s, path.c_str());
}

}  // namespace attnlab
