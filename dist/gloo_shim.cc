// dist/gloo_shim.cc - the only C++ in segtrain: Gloo (Debian's libgloo-dev)
// behind the C transport interface of dist/transport.h. Gloo's rendezvous
// runs over segtrain's TCP store (StoreAdapter below); transport is TCP on
// the address the store and the mesh use (dist/net_addr.h: the MASTER_ADDR
// interface; loopback when MASTER_ADDR is), or on GLOO_SOCKET_IFNAME's
// interface when that is set. Never the hostname's address, which Debian
// maps to 127.0.1.1 and some hosts to 127.0.0.1. One Gloo
// context per channel, so the training loop and the DDP comm thread never
// interleave collectives on one context. Gloo throws on errors and
// timeouts; every call here catches and returns SG_ERR_RUNTIME with the
// message in err (the transport contract of dist/transport.h). Exceptions
// never cross into C: the extern "C" functions catch everything.
#include <arpa/inet.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <memory>
#include <netinet/in.h>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" {
#include "core/log.h"
#include "core/sigmask.h"
#include "dist/net_addr.h"
#include "dist/store.h"
#include "dist/transport.h"
}

namespace {

// Gloo's rendezvous::Store over sg_store, with a key prefix per channel.
class StoreAdapter : public gloo::rendezvous::Store {
  public:
    StoreAdapter(sg_store *s, std::string prefix) : s_(s), prefix_(std::move(prefix)) {}
    void set(const std::string &key, const std::vector<char> &data) override {
        if (sg_store_set(s_, (prefix_ + key).c_str(), data.data(), data.size()) != SG_STORE_OK)
            throw std::runtime_error("store set of " + key + " failed");
    }
    std::vector<char> get(const std::string &key) override {
        void *v = nullptr;
        size_t n = 0;
        sg_store_rc rc = sg_store_get(s_, (prefix_ + key).c_str(), &v, &n);
        if (rc != SG_STORE_OK) throw std::runtime_error(what(key, rc));
        std::vector<char> out((char *)v, (char *)v + n);
        free(v);
        return out;
    }
    void wait(const std::vector<std::string> &keys) override {
        for (const auto &k : keys) {
            sg_store_rc rc = sg_store_wait(s_, (prefix_ + k).c_str());
            if (rc != SG_STORE_OK) throw std::runtime_error(what(k, rc));
        }
    }
    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override {
        wait(keys);
    }

  private:
    // Gloo's full-mesh rendezvous keys are the publishing rank's number
    // (possibly with a "rank_" prefix): name that rank.
    static std::string what(const std::string &key, sg_store_rc rc) {
        std::string k = key.rfind("rank_", 0) == 0 ? key.substr(5) : key;
        bool numeric = !k.empty() && k.find_first_not_of("0123456789") == std::string::npos;
        std::string who = numeric ? "rank " + k + " did not publish its Gloo address"
                                  : "store key '" + key + "' did not appear";
        return rc == SG_STORE_TIMEOUT
                   ? who + " within dist.timeout_s (is it running?)"
                   : "store request for '" + key + "' failed (rank 0's store is gone)";
    }
    sg_store *s_;
    std::string prefix_;
};

struct GlooImpl {
    std::shared_ptr<gloo::transport::Device> dev;
    std::shared_ptr<gloo::rendezvous::Context> ctx[SG_CH_COUNT];
    std::vector<char> scratch[SG_CH_COUNT]; // per channel: one thread each
    std::chrono::milliseconds timeout;
    int world;
};

GlooImpl *impl(sg_transport *t) { return static_cast<GlooImpl *>(t->impl); }

// A channel built without its context (sg_transport_gloo_create's channels)
// is never routed here by dist/comm.c: say so rather than crash.
bool no_context(sg_transport *t, int ch, char *err, size_t errlen) {
    if (impl(t)->ctx[ch]) return false;
    snprintf(err, errlen,
             "Gloo has no connections for channel %d (the mesh serves it; internal error)", ch);
    return true;
}

void set_err(char *err, size_t len, const char *what, const std::exception &e) {
    snprintf(err, len, "Gloo %s: %s", what, e.what());
}

template <typename T> void sum_fn(void *c, const void *a, const void *b, size_t n) {
    gloo::sum<T>(c, a, b, n);
}

// Small all-reduces as an all-gather plus a local sum in rank order: Gloo's
// ring all-reduce costs ~10x an all-gather's latency for a few KiB here
// (SyncBN's per-layer sums), and the rank-order sum gives every rank
// bit-identical results.
template <typename T> void gather_sum(GlooImpl *g, int ch, T *buf, size_t count) {
    std::vector<char> &tmp = g->scratch[ch];
    tmp.resize(count * sizeof(T) * (size_t)g->world);
    T *all = reinterpret_cast<T *>(tmp.data());
    gloo::AllgatherOptions o(g->ctx[ch]);
    o.setTimeout(g->timeout);
    o.setInput(buf, count);
    o.setOutput(all, count * (size_t)g->world);
    gloo::allgather(o);
    for (size_t i = 0; i < count; i++) {
        T acc = all[i];
        for (int r = 1; r < g->world; r++) acc += all[(size_t)r * count + i];
        buf[i] = acc;
    }
}

const size_t kGatherSumMaxBytes = 64 * 1024; // per rank

sg_status g_allreduce(sg_transport *t, int ch, void *buf, size_t count, int dtype, char *err,
                      size_t errlen) {
    if (no_context(t, ch, err, errlen)) return SG_ERR_RUNTIME;
    if (count == 0) return SG_OK;
    if (count * 8 <= kGatherSumMaxBytes ||
        (dtype == SG_CDT_F32 && count * 4 <= kGatherSumMaxBytes)) {
        try {
            if (dtype == SG_CDT_F32) gather_sum(impl(t), ch, static_cast<float *>(buf), count);
            else if (dtype == SG_CDT_F64)
                gather_sum(impl(t), ch, static_cast<double *>(buf), count);
            else gather_sum(impl(t), ch, static_cast<int64_t *>(buf), count);
        } catch (const std::exception &e) {
            set_err(err, errlen, "all-reduce (small, as all-gather)", e);
            return SG_ERR_RUNTIME;
        }
        return SG_OK;
    }
    try {
        gloo::AllreduceOptions o(impl(t)->ctx[ch]);
        o.setTimeout(impl(t)->timeout);
        if (dtype == SG_CDT_F32) {
            o.setOutput(static_cast<float *>(buf), count);
            o.setReduceFunction(gloo::AllreduceOptions::Func(&sum_fn<float>));
        } else if (dtype == SG_CDT_F64) {
            o.setOutput(static_cast<double *>(buf), count);
            o.setReduceFunction(gloo::AllreduceOptions::Func(&sum_fn<double>));
        } else {
            o.setOutput(static_cast<int64_t *>(buf), count);
            o.setReduceFunction(gloo::AllreduceOptions::Func(&sum_fn<int64_t>));
        }
        gloo::allreduce(o);
    } catch (const std::exception &e) {
        set_err(err, errlen, "all-reduce", e);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status g_broadcast(sg_transport *t, int ch, void *buf, size_t bytes, int root, char *err,
                      size_t errlen) {
    if (no_context(t, ch, err, errlen)) return SG_ERR_RUNTIME;
    if (bytes == 0) return SG_OK;
    try {
        gloo::BroadcastOptions o(impl(t)->ctx[ch]);
        o.setTimeout(impl(t)->timeout);
        o.setOutput(static_cast<uint8_t *>(buf), bytes);
        o.setRoot(root);
        gloo::broadcast(o);
    } catch (const std::exception &e) {
        set_err(err, errlen, "broadcast", e);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status g_allgather(sg_transport *t, int ch, const void *in, void *out, size_t bytes, char *err,
                      size_t errlen) {
    if (no_context(t, ch, err, errlen)) return SG_ERR_RUNTIME;
    if (bytes == 0) return SG_OK;
    try {
        gloo::AllgatherOptions o(impl(t)->ctx[ch]);
        o.setTimeout(impl(t)->timeout);
        o.setInput(const_cast<uint8_t *>(static_cast<const uint8_t *>(in)), bytes);
        o.setOutput(static_cast<uint8_t *>(out), bytes * (size_t)impl(t)->world);
        gloo::allgather(o);
    } catch (const std::exception &e) {
        set_err(err, errlen, "all-gather", e);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status g_barrier(sg_transport *t, int ch, char *err, size_t errlen) {
    if (no_context(t, ch, err, errlen)) return SG_ERR_RUNTIME;
    try {
        gloo::BarrierOptions o(impl(t)->ctx[ch]);
        o.setTimeout(impl(t)->timeout);
        gloo::barrier(o);
    } catch (const std::exception &e) {
        set_err(err, errlen, "barrier", e);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

void g_destroy(sg_transport *t) {
    delete impl(t);
    delete t;
}

} // namespace

extern "C" int sg_transport_gloo_compiled(void) { return 1; }

extern "C" sg_transport *sg_transport_gloo_create(sg_store *store, int rank, int world,
                                                  double timeout_s, int channels) {
    auto *g = new GlooImpl();
    g->world = world;
    g->timeout = std::chrono::milliseconds((long long)(timeout_s * 1000));
    // Gloo's device starts its event-loop thread (and connecting may start
    // more): they inherit a mask with every signal blocked, so SIGTERM and
    // SIGINT reach the training thread's stop flag (core/sigmask.h).
    sigset_t old_mask;
    sg_sigmask_block_all(&old_mask);
    struct restore_mask {
        sigset_t *m;
        ~restore_mask() { sg_sigmask_restore(m); }
    } restore{&old_mask};
    try {
        gloo::transport::tcp::attr attr;
        const char *ifname = getenv("GLOO_SOCKET_IFNAME");
        if (ifname && *ifname) {
            attr.iface = ifname;
        } else {
            const char *master = getenv("MASTER_ADDR");
            if (!master || !*master) master = "127.0.0.1";
            struct in_addr ia;
            char err[256];
            if (sg_net_listen_addr(master, &ia, nullptr, 0, err, sizeof err) != SG_OK) {
                SG_ERROR("rank %d: cannot choose an address for Gloo: %s", rank, err);
                delete g;
                return nullptr;
            }
            char host[256] = "127.0.0.1";
            if (ia.s_addr != htonl(INADDR_ANY)) inet_ntop(AF_INET, &ia, host, sizeof host);
            else { // MASTER_ADDR=0.0.0.0: every interface listens; Gloo needs one to name
                char name[256] = "";
                if (gethostname(name, sizeof name - 1) == 0 && *name)
                    snprintf(host, sizeof host, "%s", name);
            }
            attr.hostname = host;
        }
        g->dev = gloo::transport::tcp::CreateDevice(attr);
        for (int ch = 0; ch < SG_CH_COUNT; ch++) {
            if (!(channels & (1 << ch))) continue; // served by the mesh (dist/comm.c)
            StoreAdapter st(store, "gloo/ch" + std::to_string(ch) + "/");
            g->ctx[ch] = std::make_shared<gloo::rendezvous::Context>(rank, world);
            g->ctx[ch]->setTimeout(g->timeout);
            g->ctx[ch]->connectFullMesh(st, g->dev);
        }
    } catch (const std::exception &e) {
        SG_ERROR(
            "rank %d: building the Gloo mesh of %d ranks failed: %s. Another rank may have failed to "
            "start (see its log); on several hosts set GLOO_SOCKET_IFNAME to the interface to use.",
            rank, world, e.what());
        delete g;
        return nullptr;
    }
    auto *t = new sg_transport();
    t->name = "gloo";
    t->device_memory = 0;
    t->impl = g;
    t->allreduce = g_allreduce;
    t->broadcast = g_broadcast;
    t->allgather = g_allgather;
    t->barrier = g_barrier;
    t->destroy = g_destroy;
    return t;
}
