/*
 * gpufleet simulated NVML: a stand-in for libnvidia-ml.so.1 on a simulated GPU node (tests only).
 *
 * It answers for the GPUs described in a JSON file, read at nvmlInit from, in order:
 *   $GPUFLEET_SIM_GPUS_JSON, /etc/gpufleet-sim/gpus.json, or a copy appended to this very file
 *   after a marker line (so the stub still answers inside a container it was injected into).
 * As real NVML does, it only reports GPUs whose /dev/nvidia<minor> exists (in a container: the ones
 * given to it, renumbered from 0), and nvmlInit fails with "Driver Not Loaded" unless the node's
 * driver_state is "loaded". As the real library opens /dev/nvidiactl and the GPU nodes read-write, nvmlInit fails
 * with NVML_ERROR_NO_PERMISSION ("Insufficient Permissions") when a node that exists is not the process's to open
 * (EACCES: its owner, group and mode, such as 0660 for group video under NVreg_DeviceFileMode); no kernel driver
 * answers in a simulated node (ENXIO), which counts as opened. Functions it does not implement are simply absent, as on an old driver.
 * For unit tests of callers: "init_error" (a code nvmlInit returns instead), per GPU "lost": true
 * (its handle lookup fails with GPU_IS_LOST) and "mig_devices": [{name, uuid, gi_id, ci_id,
 * memory_total, slot}] (MIG instances, at their slot of nvmlDeviceGetMigDeviceHandleByIndex).
 * Health, per GPU under "health" (a fault a test injects into a node's gpus.json; every key absent answers
 * NVML_ERROR_NOT_SUPPORTED, as a board without the counter): "ecc_uncorrected_volatile",
 * "ecc_uncorrected_aggregate" (nvmlDeviceGetTotalEccErrors, uncorrected; corrected counts answer 0),
 * "remapped_rows": {correctable, uncorrectable, pending, failure} (nvmlDeviceGetRemappedRows),
 * "retired_pages_pending" (nvmlDeviceGetRetiredPagesPendingStatus), "clocks_event_reasons" (a bit mask, nvml.h
 * nvmlClocksEventReason*; nvmlDeviceGetCurrentClocksEventReasons and ...ThrottleReasons), "persistence_mode".
 * Topology, per GPU: "numa_node" (nvmlDeviceGetNumaNodeId; -1 or absent: NOT_SUPPORTED), "pcie_switch" (GPUs with
 * the same switch id share a PCIe switch) and "nvlinks" (one peer PCI bus id per active NVLink; absent: a PCIe board,
 * every NVLink call NOT_SUPPORTED), read by nvmlDeviceGetTopologyCommonAncestor and the NVLink calls.
 * Struct layouts are NVML's (nvml.h): nvmlPciInfo_t, nvmlMemory_t, nvmlMemory_v2_t.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_UNKNOWN = 999,
};

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

struct nvmlDevice_st {
    unsigned int index, minor, pci_device_id, pci_subsystem_id, arch, brand, max_mig;
    unsigned int domain, bus, dev, fn;
    int cc_major, cc_minor, mig_mode, lost;
    unsigned int gi_id, ci_id, slot, mig_first, mig_count; /* a MIG device: ids, slot; a GPU: its MIGs */
    unsigned int parent; /* a MIG device: its GPU's index */
    unsigned long long memory_total;
    char name[96], uuid[96];
    /* health: each value -1 when the JSON does not set it (NOT_SUPPORTED) */
    long long ecc_volatile, ecc_aggregate, clocks_reasons;
    int rows_corr, rows_unc, rows_pending, rows_failure, retired_pending, persistence;
    int dynamic; /* MIG instances from the GPU-instance table below (created through NVML), not "mig_devices" */
    int numa, pcie_switch; /* -1: not said */
    unsigned int nvlink_count;
    char nvlink_peer[18][32]; /* NVML_NVLINK_MAX_LINKS: each active link's peer PCI bus id */
};
typedef struct nvmlDevice_st *nvmlDevice_t;

/* ---- a tiny JSON reader: objects, arrays, strings (no \u beyond ASCII), numbers, literals ---- */
typedef struct jv {
    char t; /* o a s n b z */
    double num;
    char *str;
    int n;
    char **keys;
    struct jv **items;
} jv;

static const char *jp;
static void jws(void) { while (*jp == ' ' || *jp == '\n' || *jp == '\r' || *jp == '\t') jp++; }
static jv *jnew(char t) { jv *v = calloc(1, sizeof(jv)); if (v) v->t = t; return v; }
static void jfree(jv *v) {
    if (!v) return;
    for (int i = 0; i < v->n; i++) { jfree(v->items[i]); if (v->keys) free(v->keys[i]); }
    free(v->items); free(v->keys); free(v->str); free(v);
}
static char *jstring(void) {
    if (*jp != '"') return NULL;
    jp++;
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    while (s && *jp && *jp != '"') {
        char c = *jp++;
        if (c == '\\') {
            c = *jp++;
            switch (c) {
            case 'n': c = '\n'; break; case 't': c = '\t'; break; case 'r': c = '\r'; break;
            case 'b': c = '\b'; break; case 'f': c = '\f'; break;
            case 'u': { unsigned u = 0; if (sscanf(jp, "%4x", &u) != 1) { free(s); return NULL; }
                        jp += 4; c = (u < 128) ? (char)u : '?'; break; }
            case '\0': free(s); return NULL;
            default: break; /* \" \\ \/ */
            }
        }
        if (len + 2 > cap) { char *t = realloc(s, cap *= 2); if (!t) { free(s); return NULL; } s = t; }
        s[len++] = c;
    }
    if (!s || *jp != '"') { free(s); return NULL; }
    jp++;
    s[len] = '\0';
    return s;
}
static jv *jvalue(int depth);
static int jpush(jv *v, char *key, jv *item) {
    jv **items = realloc(v->items, sizeof(jv *) * (v->n + 1));
    if (!items) return 0;
    v->items = items;
    if (v->t == 'o') {
        char **keys = realloc(v->keys, sizeof(char *) * (v->n + 1));
        if (!keys) return 0;
        v->keys = keys; v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
    return 1;
}
static jv *jvalue(int depth) {
    jws();
    if (depth > 32) return NULL;
    jv *v = NULL;
    if (*jp == '{' || *jp == '[') {
        char close = (*jp == '{') ? '}' : ']';
        v = jnew(*jp == '{' ? 'o' : 'a');
        jp++; jws();
        if (!v) return NULL;
        if (*jp == close) { jp++; return v; }
        for (;;) {
            char *key = NULL;
            jws();
            if (v->t == 'o') {
                key = jstring(); jws();
                if (!key || *jp != ':') { free(key); jfree(v); return NULL; }
                jp++;
            }
            jv *item = jvalue(depth + 1);
            if (!item || !jpush(v, key, item)) { free(key); jfree(item); jfree(v); return NULL; }
            jws();
            if (*jp == ',') { jp++; continue; }
            if (*jp == close) { jp++; return v; }
            jfree(v); return NULL;
        }
    }
    if (*jp == '"') { v = jnew('s'); if (v && !(v->str = jstring())) { jfree(v); v = NULL; } return v; }
    if (!strncmp(jp, "true", 4)) { jp += 4; v = jnew('b'); if (v) v->num = 1; return v; }
    if (!strncmp(jp, "false", 5)) { jp += 5; return jnew('b'); }
    if (!strncmp(jp, "null", 4)) { jp += 4; return jnew('z'); }
    char *end;
    double d = strtod(jp, &end);
    if (end == jp) return NULL;
    jp = end;
    v = jnew('n');
    if (v) v->num = d;
    return v;
}
static jv *jget(jv *o, const char *key) {
    if (!o || o->t != 'o') return NULL;
    for (int i = 0; i < o->n; i++) if (!strcmp(o->keys[i], key)) return o->items[i];
    return NULL;
}
static double jnum(jv *o, const char *key, double dflt) { jv *v = jget(o, key); return (v && (v->t == 'n' || v->t == 'b')) ? v->num : dflt; }
static const char *jstr(jv *o, const char *key, const char *dflt) { jv *v = jget(o, key); return (v && v->t == 's') ? v->str : dflt; }

/* ---- state ---- */
#define MAX_GPUS 64
static struct nvmlDevice_st devices[MAX_GPUS];

/* A GPU's MIG profiles as NVML answers them (nvmlDeviceGetGpuInstanceProfileInfo, ..PossiblePlacements_v2): the
 * profile's enum (NVML_GPU_INSTANCE_PROFILE_*, what GetGpuInstanceProfileInfo takes) -> its id (what
 * nvmlDeviceCreateGpuInstance* takes and nvidia-smi shows), compute slices, memory slices, instances at most, SMs,
 * copy engines, decoders, encoders, JPEG and OFA engines, placement starts (a bit mask of memory slices), memory.
 * The name is what the MIG device's name ends with. A GPU's set comes from "mig_profiles" in gpus.json (any set,
 * for a model no table has) or, for an A100-SXM4-40GB / A100-PCIE-40GB without one, from a100[] below: NVIDIA's
 * numbers for that model (MIG user guide, "Supported MIG Profiles" and the placements `nvidia-smi mig -lgipp`
 * lists). */
#define MAX_PROF 17 /* NVML_GPU_INSTANCE_PROFILE_COUNT */
struct mig_prof {
    char name[32];
    unsigned int enumv, id, slices, size, count, sms, ces, decs, encs, jpegs, ofas, starts;
    unsigned long long mib;
};
static const struct mig_prof a100[] = {
    {"1g.5gb", 0, 19, 1, 1, 7, 14, 1, 0, 0, 0, 0, 0x7f, 4864},
    {"2g.10gb", 1, 14, 2, 2, 3, 28, 2, 1, 0, 0, 0, 0x15, 9856},
    {"3g.20gb", 2, 9, 3, 4, 2, 42, 3, 2, 0, 0, 0, 0x11, 19968},
    {"4g.20gb", 3, 5, 4, 4, 1, 56, 4, 2, 0, 0, 0, 0x01, 19968},
    {"7g.40gb", 4, 0, 7, 8, 1, 98, 7, 5, 0, 1, 1, 0x01, 40192},
    {"1g.5gb+me", 7, 20, 1, 1, 1, 14, 1, 1, 0, 1, 1, 0x7f, 4864},
    {"1g.10gb", 9, 15, 1, 2, 4, 14, 1, 1, 0, 0, 0, 0x55, 9856},
};
static struct mig_prof profs[MAX_GPUS][MAX_PROF];
static unsigned int nprofs[MAX_GPUS];
/* "mig_gi_limit" in gpus.json: GPU-instance creation fails (INSUFFICIENT_RESOURCES) once the GPU has that many, as a
 * real GPU does when a placement is taken by what NVML cannot see (tests of a half-applied layout). */
static unsigned int gi_limit[MAX_GPUS];
static unsigned int device_count;
static int init_count;
#define MAX_MIGS 256
static struct nvmlDevice_st migs[MAX_MIGS];
static unsigned int mig_total;
static char driver_version[80] = "0.0", nvml_version[80] = "0.0", driver_state[32] = "none";
static int cuda_version;

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 65536, n = 0, r;
    char *buf = malloc(cap + 1);
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) { char *t = realloc(buf, (cap *= 2) + 1); if (!t) { free(buf); buf = NULL; break; } buf = t; }
    }
    fclose(f);
    if (buf) { buf[n] = '\0'; if (len) *len = n; }
    return buf;
}

/* Where MIG instances made through NVML are kept between processes: "mig-state" beside the gpus.json read (none
 * when the config came from the library's own copy, inside a container: there the state is the host's business). */
static char state_path[4096];
static void set_state_path(const char *config) {
    const char *slash = strrchr(config, '/');
    int dir = slash ? (int)(slash - config) : 1;
    snprintf(state_path, sizeof(state_path), "%.*s/mig-state", dir, slash ? config : ".");
}
static char *load_config_text(void) {
    const char *env = getenv("GPUFLEET_SIM_GPUS_JSON");
    char *text;
    state_path[0] = '\0';
    if (env && *env && (text = read_file(env, NULL))) { set_state_path(env); return text; }
    if ((text = read_file("/etc/gpufleet-sim/gpus.json", NULL))) { set_state_path("/etc/gpufleet-sim/gpus.json"); return text; }
    Dl_info info;
    size_t len = 0;
    char marker[64];
    if (!dladdr((void *)load_config_text, &info) || !info.dli_fname) return NULL;
    if (!(text = read_file(info.dli_fname, &len))) return NULL;
    /* Built at run time so the marker string does not occur in the library itself. */
    snprintf(marker, sizeof(marker), "\n%s%s\n", "#GPUFLEET-SIM", "-JSON#");
    size_t mlen = strlen(marker);
    for (size_t i = len >= mlen ? len - mlen + 1 : 0; i-- > 0;) {
        if (!memcmp(text + i, marker, mlen)) {
            char *json = strdup(text + i + mlen);
            free(text);
            return json;
        }
    }
    free(text);
    return NULL;
}

static void mig_load_state(void);
static void static_instances(void);
static struct nvmlDevice_st *mig_by_uuid(const char *uuid);
static void copy_str(char *dst, size_t size, const char *src) { snprintf(dst, size, "%s", src ? src : ""); }

/* Whether this process may not open a device node that exists (EACCES); missing, or no driver behind it, is not. */
static int denied(const char *path) {
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd >= 0) { close(fd); return 0; }
    return errno == EACCES;
}

/* Whether a device cgroup keeps this process from a device node (EPERM on open, as under Slurm's
 * ConstrainDevices or a container's device rules): NVIDIA's NVML then does not list that GPU. */
static int cgroup_hidden(const char *path) {
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd >= 0) { close(fd); return 0; }
    return errno == EPERM;
}

static nvmlReturn_t load_config(void) {
    char *text = load_config_text();
    if (!text) return NVML_ERROR_DRIVER_NOT_LOADED;
    jp = text;
    jv *root = jvalue(0);
    free(text);
    if (!root || root->t != 'o') { jfree(root); return NVML_ERROR_UNKNOWN; }
    copy_str(driver_state, sizeof(driver_state), jstr(root, "driver_state", "none"));
    copy_str(driver_version, sizeof(driver_version), jstr(root, "driver_version", "0.0"));
    copy_str(nvml_version, sizeof(nvml_version), jstr(root, "nvml_version", "0.0"));
    cuda_version = (int)jnum(root, "cuda_version", 0);
    int all = (int)jnum(root, "all_devices", 0); /* debugging: ignore which /dev nodes exist */
    int init_error = (int)jnum(root, "init_error", 0);
    device_count = 0;
    mig_total = 0;
    jv *gpus = jget(root, "gpus");
    for (int i = 0; gpus && gpus->t == 'a' && i < gpus->n && device_count < MAX_GPUS; i++) {
        jv *g = gpus->items[i];
        struct nvmlDevice_st *d = &devices[device_count];
        char node[64];
        memset(d, 0, sizeof(*d));
        d->minor = (unsigned)jnum(g, "minor", i);
        snprintf(node, sizeof(node), "/dev/nvidia%u", d->minor);
        if (!all && (access(node, F_OK) != 0 || cgroup_hidden(node))) continue;
        d->index = device_count;
        copy_str(d->name, sizeof(d->name), jstr(g, "name", "NVIDIA Simulated GPU"));
        copy_str(d->uuid, sizeof(d->uuid), jstr(g, "uuid", ""));
        if (sscanf(jstr(g, "pci_bus_id", ""), "%x:%x:%x.%x", &d->domain, &d->bus, &d->dev, &d->fn) != 4) continue;
        d->pci_device_id = (unsigned)jnum(g, "pci_device_id", 0x10de);
        d->pci_subsystem_id = (unsigned)jnum(g, "pci_subsystem_id", 0);
        d->memory_total = (unsigned long long)jnum(g, "memory_total", 0);
        d->cc_major = (int)jnum(g, "cc_major", 0);
        d->cc_minor = (int)jnum(g, "cc_minor", 0);
        d->arch = (unsigned)jnum(g, "architecture", 0);
        d->brand = (unsigned)jnum(g, "brand", 0);
        d->mig_mode = (int)jnum(g, "mig_mode", -1);
        d->max_mig = (unsigned)jnum(g, "max_mig_devices", 0);
        d->lost = (int)jnum(g, "lost", 0);
        d->numa = (int)jnum(g, "numa_node", -1);
        d->pcie_switch = (int)jnum(g, "pcie_switch", -1);
        jv *links = jget(g, "nvlinks");
        d->nvlink_count = 0;
        for (int k = 0; links && links->t == 'a' && k < links->n && k < 18; k++)
            if (links->items[k]->t == 's') copy_str(d->nvlink_peer[d->nvlink_count++], 32, links->items[k]->str);
        jv *h = jget(g, "health");
        jv *rows = jget(h, "remapped_rows");
        d->ecc_volatile = (long long)jnum(h, "ecc_uncorrected_volatile", -1);
        d->ecc_aggregate = (long long)jnum(h, "ecc_uncorrected_aggregate", -1);
        d->clocks_reasons = (long long)jnum(h, "clocks_event_reasons", -1);
        d->rows_corr = rows ? (int)jnum(rows, "correctable", 0) : -1;
        d->rows_unc = (int)jnum(rows, "uncorrectable", 0);
        d->rows_pending = (int)jnum(rows, "pending", 0);
        d->rows_failure = (int)jnum(rows, "failure", 0);
        d->retired_pending = (int)jnum(h, "retired_pages_pending", -1);
        d->persistence = (int)jnum(h, "persistence_mode", -1);
        nprofs[device_count] = 0;
        gi_limit[device_count] = (unsigned)jnum(g, "mig_gi_limit", 0);
        jv *ps = jget(g, "mig_profiles");
        if (ps && ps->t == 'a') {
            for (int k = 0; k < ps->n && nprofs[device_count] < MAX_PROF; k++) {
                jv *q = ps->items[k], *st = jget(q, "placements");
                struct mig_prof *r = &profs[device_count][nprofs[device_count]++];
                memset(r, 0, sizeof(*r));
                copy_str(r->name, sizeof(r->name), jstr(q, "name", "?"));
                r->enumv = (unsigned)jnum(q, "enum", 0); r->id = (unsigned)jnum(q, "id", 0);
                r->slices = (unsigned)jnum(q, "slices", 1); r->size = (unsigned)jnum(q, "memory_slices", 1);
                r->count = (unsigned)jnum(q, "instances", 1); r->sms = (unsigned)jnum(q, "sms", 0);
                r->ces = (unsigned)jnum(q, "copy_engines", 0); r->decs = (unsigned)jnum(q, "decoders", 0);
                r->encs = (unsigned)jnum(q, "encoders", 0); r->jpegs = (unsigned)jnum(q, "jpegs", 0);
                r->ofas = (unsigned)jnum(q, "ofas", 0); r->mib = (unsigned long long)jnum(q, "memory_mib", 0);
                for (int j = 0; st && st->t == 'a' && j < st->n; j++) r->starts |= 1u << ((unsigned)st->items[j]->num & 31);
            }
        } else if (d->mig_mode >= 0 && (strstr(d->name, "A100-SXM4-40GB") || strstr(d->name, "A100-PCIE-40GB"))) {
            nprofs[device_count] = sizeof(a100) / sizeof(a100[0]);
            memcpy(profs[device_count], a100, sizeof(a100));
        }
        d->mig_first = mig_total;
        jv *ms = jget(g, "mig_devices");
        for (int k = 0; ms && ms->t == 'a' && k < ms->n && mig_total < MAX_MIGS; k++) {
            struct nvmlDevice_st *m = &migs[mig_total++];
            memset(m, 0, sizeof(*m));
            copy_str(m->name, sizeof(m->name), jstr(ms->items[k], "name", ""));
            copy_str(m->uuid, sizeof(m->uuid), jstr(ms->items[k], "uuid", ""));
            m->gi_id = (unsigned)jnum(ms->items[k], "gi_id", 0);
            m->ci_id = (unsigned)jnum(ms->items[k], "ci_id", 0);
            m->slot = (unsigned)jnum(ms->items[k], "slot", k);
            m->memory_total = (unsigned long long)jnum(ms->items[k], "memory_total", 0);
            m->mig_mode = -1;
            m->parent = device_count;
        }
        d->mig_count = mig_total - d->mig_first;
        device_count++;
    }
    jfree(root);
    mig_load_state();
    static_instances();
    if (init_error) return init_error;
    if (strcmp(driver_state, "loaded")) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (!all && denied("/dev/nvidiactl")) return NVML_ERROR_NO_PERMISSION;
    for (unsigned i = 0; !all && i < device_count; i++) {
        char node[64];
        snprintf(node, sizeof(node), "/dev/nvidia%u", devices[i].minor);
        if (denied(node)) return NVML_ERROR_NO_PERMISSION;
    }
    return NVML_SUCCESS;
}

#define CHECK_INIT() do { if (__atomic_load_n(&init_count, __ATOMIC_ACQUIRE) <= 0) return NVML_ERROR_UNINITIALIZED; } while (0)
#define CHECK_DEV(d) do { CHECK_INIT(); if (!(d) || (d) < devices || (d) >= devices + device_count) return NVML_ERROR_INVALID_ARGUMENT; } while (0)
#define MAX_GI 16 /* GPU-instance ids 1..16 (an A100's go up to 14) */
static struct nvmlDevice_st dyn_migs[MAX_GPUS][MAX_GI];
#define IS_DYN_MIG(d) ((d) && (d) >= &dyn_migs[0][0] && (d) < &dyn_migs[0][0] + MAX_GPUS * MAX_GI)
#define IS_MIG(d) ((d) && (((d) >= migs && (d) < migs + mig_total) || IS_DYN_MIG(d)))
/* A GPU or a MIG device handle. */
#define CHECK_ANY(d) do { CHECK_INIT(); if (!IS_MIG(d) && (!(d) || (d) < devices || (d) >= devices + device_count)) return NVML_ERROR_INVALID_ARGUMENT; } while (0)
static struct nvmlDevice_st *mig_by_uuid(const char *uuid) {
    for (unsigned int k = 0; k < mig_total; k++) if (!strcmp(migs[k].uuid, uuid)) return &migs[k];
    for (unsigned int i = 0; i < device_count; i++)
        for (unsigned int k = 0; k < MAX_GI; k++)
            if (dyn_migs[i][k].gi_id && !strcmp(dyn_migs[i][k].uuid, uuid)) return &dyn_migs[i][k];
    return NULL;
}

/* nvmlInit and nvmlShutdown may be called from several threads at once (NVIDIA's device plugin does): the
 * configuration is read, and the count changed, under one lock (a spin lock: no libpthread to link). */
static char init_lock;
static void lock_init(void) { while (__atomic_test_and_set(&init_lock, __ATOMIC_ACQUIRE)) { } }
static void unlock_init(void) { __atomic_clear(&init_lock, __ATOMIC_RELEASE); }
API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    lock_init();
    nvmlReturn_t ret = NVML_SUCCESS;
    if (init_count > 0) __atomic_add_fetch(&init_count, 1, __ATOMIC_RELEASE);
    else if ((ret = load_config()) == NVML_SUCCESS) __atomic_store_n(&init_count, 1, __ATOMIC_RELEASE);
    unlock_init();
    return ret;
}
API nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
API nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
API nvmlReturn_t nvmlShutdown(void) {
    lock_init();
    nvmlReturn_t ret = init_count > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (init_count > 0) __atomic_sub_fetch(&init_count, 1, __ATOMIC_RELEASE);
    unlock_init();
    return ret;
}

API const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t put_str(char *buf, unsigned int len, const char *s) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) { CHECK_INIT(); return put_str(v, len, driver_version); }
API nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) { CHECK_INIT(); return put_str(v, len, nvml_version); }
API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    CHECK_INIT();
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = cuda_version;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    CHECK_INIT();
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = device_count;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    CHECK_INIT();
    if (!dev || index >= device_count) return NVML_ERROR_INVALID_ARGUMENT;
    if (devices[index].lost) return NVML_ERROR_GPU_IS_LOST;
    *dev = &devices[index];
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *dev) { return nvmlDeviceGetHandleByIndex_v2(index, dev); }

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev) {
    CHECK_INIT();
    if (!uuid || !dev) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < device_count; i++)
        if (!strcmp(devices[i].uuid, uuid)) { *dev = &devices[i]; return NVML_SUCCESS; }
    *dev = mig_by_uuid(uuid); /* a MIG device's UUID names it too */
    return *dev ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *dev) {
    CHECK_INIT();
    unsigned int dom = 0, bus, d, fn;
    if (!bus_id || !dev) return NVML_ERROR_INVALID_ARGUMENT;
    if (sscanf(bus_id, "%x:%x:%x.%x", &dom, &bus, &d, &fn) != 4) {
        dom = 0;
        if (sscanf(bus_id, "%x:%x.%x", &bus, &d, &fn) != 3) return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < device_count; i++) {
        struct nvmlDevice_st *x = &devices[i];
        if (x->domain == dom && x->bus == bus && x->dev == d && x->fn == fn) { *dev = x; return NVML_SUCCESS; }
    }
    return NVML_ERROR_NOT_FOUND;
}
API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus_id, nvmlDevice_t *dev) { return nvmlDeviceGetHandleByPciBusId_v2(bus_id, dev); }

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) { CHECK_ANY(d); return put_str(name, len, d->name); }
API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len) { CHECK_ANY(d); return put_str(uuid, len, d->uuid); }
API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    CHECK_DEV(d);
    if (!minor) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = d->minor;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    CHECK_DEV(d);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = d->index;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    CHECK_DEV(d);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    pci->domain = d->domain;
    pci->bus = d->bus;
    pci->device = d->dev;
    pci->pciDeviceId = d->pci_device_id;
    pci->pciSubSystemId = d->pci_subsystem_id;
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", d->domain & 0xffff, d->bus, d->dev, d->fn);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", d->domain, d->bus, d->dev, d->fn);
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(d, pci); }
API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(d, pci); }

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *mem) {
    CHECK_ANY(d);
    if (!mem) return NVML_ERROR_INVALID_ARGUMENT;
    mem->total = d->memory_total;
    mem->used = 0;
    mem->free = d->memory_total;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *mem) {
    CHECK_DEV(d);
    if (!mem) return NVML_ERROR_INVALID_ARGUMENT;
    mem->total = d->memory_total;
    mem->reserved = 0;
    mem->used = 0;
    mem->free = d->memory_total;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    CHECK_DEV(d);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = d->cc_major;
    *minor = d->cc_minor;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned int *arch) {
    CHECK_DEV(d);
    if (!arch) return NVML_ERROR_INVALID_ARGUMENT;
    *arch = d->arch;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, int *brand) {
    CHECK_DEV(d);
    if (!brand) return NVML_ERROR_INVALID_ARGUMENT;
    *brand = (int)d->brand;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    CHECK_DEV(d);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = (unsigned int)d->mig_mode;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    CHECK_DEV(d);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *count = d->max_mig;
    return NVML_SUCCESS;
}
/* A fleet's nodes have no MIG instances (every valid slot is empty) unless "mig_devices" lists some. */
API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig) {
    CHECK_DEV(d);
    if (!mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= d->max_mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->dynamic) {
        struct nvmlDevice_st *m = &dyn_migs[d->index][0];
        for (unsigned int k = 0; k < MAX_GI; k++)
            if (m[k].gi_id && m[k].slot == index) { *mig = &m[k]; return NVML_SUCCESS; }
        return NVML_ERROR_NOT_FOUND;
    }
    for (unsigned int k = 0; k < d->mig_count; k++)
        if (migs[d->mig_first + k].slot == index) { *mig = &migs[d->mig_first + k]; return NVML_SUCCESS; }
    return NVML_ERROR_NOT_FOUND;
}
API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    CHECK_INIT();
    if (!IS_MIG(d) || !id) return NVML_ERROR_INVALID_ARGUMENT;
    *id = d->gi_id;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    CHECK_INIT();
    if (!IS_MIG(d) || !id) return NVML_ERROR_INVALID_ARGUMENT;
    *id = d->ci_id;
    return NVML_SUCCESS;
}

/* ---- MIG instance management (the GPU's profiles above; state kept in "mig-state" beside gpus.json) ----
 * Each GPU instance holds at most one compute instance, spanning it (as mig-parted makes them). Structures are nvml.h's (go-nvml gen/nvml/nvml.h at 2f9e261f). */
#define NVML_ERROR_IN_USE 19
#define NVML_ERROR_INSUFFICIENT_RESOURCES 23
typedef struct { unsigned int start, size; } nvmlGpuInstancePlacement_t;
typedef struct {
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount, decoderCount,
        encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;
typedef struct {
    unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;
struct gi_st;
struct ci_st { struct gi_st *gi; };
struct gi_st {
    struct nvmlDevice_st *dev;
    unsigned int id, profile, start, size, has_ci;
    struct ci_st ci;
};
typedef struct gi_st *nvmlGpuInstance_t;
typedef struct ci_st *nvmlComputeInstance_t;
typedef struct { nvmlDevice_t device; unsigned int id, profileId; nvmlGpuInstancePlacement_t placement; } nvmlGpuInstanceInfo_t;
typedef struct {
    nvmlDevice_t device; nvmlGpuInstance_t gpuInstance; unsigned int id, profileId; nvmlGpuInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

static struct gi_st gis[MAX_GPUS][MAX_GI];

static int has_profiles(nvmlDevice_t d) { return d->mig_mode >= 0 && nprofs[d->index] > 0; }
#define PROF(d, p) (profs[(d)->index][(p)])
static int profile_by_id(nvmlDevice_t d, unsigned int id) { for (unsigned p = 0; p < nprofs[d->index]; p++) if (PROF(d, p).id == id) return (int)p; return -1; }
static int profile_by_enum(nvmlDevice_t d, unsigned int e) { for (unsigned p = 0; p < nprofs[d->index]; p++) if (PROF(d, p).enumv == e) return (int)p; return -1; }
/* The GPU's compute slices: those of its largest profile. */
static unsigned int compute_slices(nvmlDevice_t d) { unsigned n = 0; for (unsigned p = 0; p < nprofs[d->index]; p++) if (PROF(d, p).slices > n) n = PROF(d, p).slices; return n; }
/* NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE enums 0..6 -> n. */
static const unsigned int ci_enum_slices[] = {1, 2, 3, 4, 7, 8, 6};
#define CI_ENUMS 7
static unsigned int ci_enum_of(unsigned int slices) { for (unsigned e = 0; e < CI_ENUMS; e++) if (ci_enum_slices[e] == slices) return e; return 0; }

/* The MIG device handles of a GPU: one per compute instance, slots in GPU-instance order. */
static void mig_rebuild(nvmlDevice_t d) {
    struct nvmlDevice_st *m = dyn_migs[d->index];
    unsigned int slot = 0, hash = 2166136261u;
    for (const char *c = d->uuid; *c; c++) hash = (hash ^ (unsigned char)*c) * 16777619u;
    memset(m, 0, sizeof(dyn_migs[0]));
    for (unsigned int k = 0; k < MAX_GI; k++) {
        struct gi_st *g = &gis[d->index][k];
        if (!g->id || !g->has_ci) continue;
        struct nvmlDevice_st *x = &m[k];
        snprintf(x->name, sizeof(x->name), "%.80s MIG %s", d->name, PROF(g->dev, g->profile).name);
        snprintf(x->uuid, sizeof(x->uuid), "MIG-%08x-%04x-%04x-0000-%012x", hash, g->id, 0, d->index);
        x->gi_id = g->id;
        x->ci_id = 0;
        x->slot = slot++;
        x->memory_total = PROF(g->dev, g->profile).mib * 1024ULL * 1024ULL;
        x->mig_mode = -1;
        x->parent = d->index;
    }
}

static void mig_save_state(void) {
    char tmp[4200];
    if (!state_path[0]) return;
    snprintf(tmp, sizeof(tmp), "%s.tmp", state_path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    for (unsigned int i = 0; i < device_count; i++) {
        if (!devices[i].dynamic) continue;
        fprintf(f, "gpu %s %d\n", devices[i].uuid, devices[i].mig_mode);
        for (unsigned int k = 0; k < MAX_GI; k++) {
            struct gi_st *g = &gis[i][k];
            if (g->id) fprintf(f, "gi %s %u %u %u %u\n", devices[i].uuid, g->id, g->profile, g->start, g->has_ci);
        }
    }
    if (fclose(f) == 0) rename(tmp, state_path);
}

static nvmlDevice_t device_by_uuid(const char *uuid) {
    for (unsigned int i = 0; i < device_count; i++) if (!strcmp(devices[i].uuid, uuid)) return &devices[i];
    return NULL;
}

static void mig_load_state(void) {
    char line[512], uuid[128];
    memset(gis, 0, sizeof(gis));
    if (!state_path[0]) return;
    FILE *f = fopen(state_path, "r");
    if (!f) return;
    while (fgets(line, sizeof(line), f)) {
        int mode;
        unsigned int id, profile, start, has_ci;
        if (sscanf(line, "gpu %127s %d", uuid, &mode) == 2) {
            nvmlDevice_t d = device_by_uuid(uuid);
            if (d && d->mig_mode >= 0) { d->dynamic = 1; d->mig_mode = mode; }
        } else if (sscanf(line, "gi %127s %u %u %u %u", uuid, &id, &profile, &start, &has_ci) == 5) {
            nvmlDevice_t d = device_by_uuid(uuid);
            if (!d || !d->dynamic || profile >= nprofs[d->index] || id == 0 || id > MAX_GI) continue;
            struct gi_st *g = &gis[d->index][id - 1];
            g->dev = d; g->id = id; g->profile = profile; g->start = start; g->size = PROF(d, profile).size;
            g->has_ci = has_ci; g->ci.gi = g;
        }
    }
    fclose(f);
    for (unsigned int i = 0; i < device_count; i++) if (devices[i].dynamic) mig_rebuild(&devices[i]);
}

/* The GPU and compute instances of the MIG devices gpus.json lists ("mig_devices": made before boot, not through
 * NVML), so that nvmlDeviceGetGpuInstanceById, nvmlGpuInstanceGetComputeInstanceById and the profile lookups of
 * NVIDIA's tools (nvidia-ctk cdi generate, go-nvlib) find them: each at its gi_id, of the profile its name ends
 * with, at the first placement of that profile left free, with its one compute instance (ci 0). */
static void static_instances(void) {
    for (unsigned int i = 0; i < device_count; i++) {
        nvmlDevice_t d = &devices[i];
        if (d->dynamic) continue;
        unsigned int used = 0;
        for (unsigned int k = 0; k < d->mig_count; k++) {
            struct nvmlDevice_st *m = &migs[d->mig_first + k];
            const char *tail = strstr(m->name, "MIG ");
            int p = -1;
            for (unsigned q = 0; tail && q < nprofs[i]; q++) if (!strcmp(tail + 4, profs[i][q].name)) { p = (int)q; break; }
            if (p < 0 || m->gi_id == 0 || m->gi_id > MAX_GI) continue;
            struct gi_st *g = &gis[i][m->gi_id - 1];
            unsigned int start = 0, size = profs[i][p].size, mask = (1u << size) - 1;
            for (start = 0; start < 8; start++)
                if ((profs[i][p].starts & (1u << start)) && !(used & (mask << start))) break;
            if (start == 8) start = 0;
            used |= mask << start;
            g->dev = d; g->id = m->gi_id; g->profile = (unsigned)p; g->start = start; g->size = size;
            g->has_ci = 1; g->ci.gi = g;
        }
    }
}

static int gi_count(nvmlDevice_t d) { int n = 0; for (int k = 0; k < MAX_GI; k++) n += gis[d->index][k].id != 0; return n; }
#define CHECK_GI(g) do { CHECK_INIT(); if (!(g) || (g) < &gis[0][0] || (g) >= &gis[0][0] + MAX_GPUS * MAX_GI || !(g)->id) return NVML_ERROR_INVALID_ARGUMENT; } while (0)

API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t d, unsigned int mode, nvmlReturn_t *activationStatus) {
    CHECK_DEV(d);
    if (!activationStatus || mode > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    if (mode == 0 && gi_count(d)) return NVML_ERROR_IN_USE; /* instances first */
    d->mig_mode = (int)mode;
    d->dynamic = 1;
    mig_rebuild(d);
    mig_save_state();
    *activationStatus = NVML_SUCCESS; /* bare metal: the reset happens in the call (nothing holds the GPU) */
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info) {
    CHECK_DEV(d);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    int p = has_profiles(d) ? profile_by_enum(d, profile) : -1;
    if (p < 0) return NVML_ERROR_NOT_SUPPORTED;
    const struct mig_prof *r = &PROF(d, p);
    memset(info, 0, sizeof(*info));
    info->id = r->id; info->sliceCount = r->slices; info->instanceCount = r->count;
    info->multiprocessorCount = r->sms; info->copyEngineCount = r->ces; info->decoderCount = r->decs;
    info->encoderCount = r->encs; info->jpegCount = r->jpegs; info->ofaCount = r->ofas; info->memorySizeMB = r->mib;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t d, unsigned int profileId, nvmlGpuInstancePlacement_t *placements, unsigned int *count) {
    CHECK_DEV(d);
    int p = profile_by_id(d, profileId);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!has_profiles(d) || p < 0) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int n = 0;
    for (unsigned int s = 0; s < 8; s++) {
        if (!(PROF(d, p).starts & (1u << s))) continue;
        if (placements) {
            if (n >= *count) return NVML_ERROR_INSUFFICIENT_SIZE;
            placements[n].start = s; placements[n].size = PROF(d, p).size;
        }
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t d, unsigned int profileId, const nvmlGpuInstancePlacement_t *placement, nvmlGpuInstance_t *gi) {
    CHECK_DEV(d);
    int p = profile_by_id(d, profileId);
    if (!placement || !gi) return NVML_ERROR_INVALID_ARGUMENT;
    if (!has_profiles(d) || p < 0) return NVML_ERROR_NOT_SUPPORTED;
    if (d->mig_mode != 1) return NVML_ERROR_NOT_SUPPORTED; /* MIG off: no instance */
    if (placement->start > 7 || !(PROF(d, p).starts & (1u << placement->start))) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int used = 0, slices = 0, want = ((1u << PROF(d, p).size) - 1) << placement->start;
    struct gi_st *free_slot = NULL;
    for (int k = 0; k < MAX_GI; k++) {
        struct gi_st *g = &gis[d->index][k];
        if (!g->id) { if (!free_slot) free_slot = g; continue; }
        used |= ((1u << g->size) - 1) << g->start;
        slices += PROF(g->dev, g->profile).slices;
    }
    if ((used & want) || slices + PROF(d, p).slices > compute_slices(d) || !free_slot) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (gi_limit[d->index] && (unsigned)gi_count(d) >= gi_limit[d->index]) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    memset(free_slot, 0, sizeof(*free_slot));
    free_slot->dev = d; free_slot->id = (unsigned int)(free_slot - gis[d->index]) + 1; free_slot->profile = (unsigned)p;
    free_slot->start = placement->start; free_slot->size = PROF(d, p).size; free_slot->ci.gi = free_slot;
    d->dynamic = 1;
    mig_rebuild(d);
    mig_save_state();
    *gi = free_slot;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t d, unsigned int profileId, nvmlGpuInstance_t *out, unsigned int *count) {
    CHECK_DEV(d);
    int p = profile_by_id(d, profileId);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!has_profiles(d) || p < 0) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int n = 0;
    for (int k = 0; k < MAX_GI; k++) {
        struct gi_st *g = &gis[d->index][k];
        if (g->id && (int)g->profile == p) { if (out) out[n] = g; n++; }
    }
    *count = n;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t g, nvmlGpuInstanceInfo_t *info) {
    CHECK_GI(g);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    info->device = g->dev; info->id = g->id; info->profileId = PROF(g->dev, g->profile).id;
    info->placement.start = g->start; info->placement.size = g->size;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t g) {
    CHECK_GI(g);
    if (g->has_ci) return NVML_ERROR_IN_USE;
    nvmlDevice_t d = g->dev;
    memset(g, 0, sizeof(*g));
    mig_rebuild(d);
    mig_save_state();
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t g, unsigned int profile, unsigned int engProfile, nvmlComputeInstanceProfileInfo_t *info) {
    CHECK_GI(g);
    if (!info || engProfile != 0) return NVML_ERROR_INVALID_ARGUMENT;
    /* Only the compute instance spanning the GPU instance (NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE, n its slices). */
    if (profile >= CI_ENUMS || ci_enum_slices[profile] != PROF(g->dev, g->profile).slices) return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof(*info));
    info->id = profile; info->sliceCount = PROF(g->dev, g->profile).slices; info->instanceCount = 1;
    info->multiprocessorCount = PROF(g->dev, g->profile).sms; info->sharedCopyEngineCount = PROF(g->dev, g->profile).ces;
    info->sharedDecoderCount = PROF(g->dev, g->profile).decs;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t g, unsigned int profileId, nvmlComputeInstance_t *ci) {
    CHECK_GI(g);
    if (!ci) return NVML_ERROR_INVALID_ARGUMENT;
    if (profileId >= CI_ENUMS || ci_enum_slices[profileId] != PROF(g->dev, g->profile).slices) return NVML_ERROR_NOT_SUPPORTED;
    if (g->has_ci) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    g->has_ci = 1;
    mig_rebuild(g->dev);
    mig_save_state();
    *ci = &g->ci;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t g, unsigned int profileId, nvmlComputeInstance_t *out, unsigned int *count) {
    CHECK_GI(g);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    if (g->has_ci && profileId < CI_ENUMS) {
        if (ci_enum_slices[profileId] == PROF(g->dev, g->profile).slices) { if (out) out[0] = &g->ci; n = 1; }
    }
    *count = n;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info) {
    CHECK_INIT();
    if (!ci || !ci->gi || !ci->gi->has_ci || !info) return NVML_ERROR_INVALID_ARGUMENT;
    info->device = ci->gi->dev; info->gpuInstance = ci->gi; info->id = 0;
    info->profileId = ci_enum_of(PROF(ci->gi->dev, ci->gi->profile).slices); info->placement.start = 0; info->placement.size = PROF(ci->gi->dev, ci->gi->profile).slices;
    return NVML_SUCCESS;
}
#define NVML_ERROR_NOT_FOUND_ 6
API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id, nvmlGpuInstance_t *gi) {
    CHECK_DEV(d);
    if (!gi) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_mode != 1) return NVML_ERROR_NOT_SUPPORTED;
    if (id == 0 || id > MAX_GI || !gis[d->index][id - 1].id) return NVML_ERROR_NOT_FOUND_;
    *gi = &gis[d->index][id - 1];
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t g, unsigned int id, nvmlComputeInstance_t *ci) {
    CHECK_GI(g);
    if (!ci) return NVML_ERROR_INVALID_ARGUMENT;
    if (id != 0 || !g->has_ci) return NVML_ERROR_NOT_FOUND_;
    *ci = &g->ci;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *d) {
    CHECK_INIT();
    if (!IS_MIG(mig) || !d || mig->parent >= device_count) return NVML_ERROR_INVALID_ARGUMENT;
    *d = &devices[mig->parent];
    return NVML_SUCCESS;
}
/* nvmlDeviceAttributes_t: a MIG device's share of its GPU (nvml.h). */
typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount,
        sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;
API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t mig, nvmlDeviceAttributes_t *a) {
    CHECK_ANY(mig);
    if (!a) return NVML_ERROR_INVALID_ARGUMENT;
    if (!IS_MIG(mig) || mig->parent >= device_count || mig->gi_id == 0 || mig->gi_id > MAX_GI) return NVML_ERROR_NOT_SUPPORTED;
    struct gi_st *g = &gis[mig->parent][mig->gi_id - 1];
    if (!g->id) return NVML_ERROR_NOT_SUPPORTED;
    const struct mig_prof *r = &PROF(g->dev, g->profile);
    memset(a, 0, sizeof(*a));
    a->multiprocessorCount = r->sms; a->sharedCopyEngineCount = r->ces; a->sharedDecoderCount = r->decs;
    a->sharedEncoderCount = r->encs; a->sharedJpegCount = r->jpegs; a->sharedOfaCount = r->ofas;
    a->gpuInstanceSliceCount = r->slices; a->computeInstanceSliceCount = r->slices; a->memorySizeMB = r->mib;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t mig, nvmlDeviceAttributes_t *a) { return nvmlDeviceGetAttributes_v2(mig, a); }
API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci) {
    CHECK_INIT();
    if (!ci || !ci->gi || !ci->gi->id || !ci->gi->has_ci) return NVML_ERROR_INVALID_ARGUMENT;
    ci->gi->has_ci = 0;
    mig_rebuild(ci->gi->dev);
    mig_save_state();
    return NVML_SUCCESS;
}

/* ---- what the real nvidia-smi needs ---- */
/* nvidia-smi (535, 550) asks nvmlInternalGetExportTable, right after nvmlInit, for NVML's private table of
 * entry points and stops with "Mismatch in versions between nvidia-smi and NVML" when it is missing. It
 * reads a slot only when the table's first word (its size in bytes) reaches past it and falls back to the
 * public functions (dlsym) otherwise or when a slot fails: so a table whose every slot answers
 * NVML_ERROR_NOT_SUPPORTED makes nvidia-smi use the public API below. Its layout is NVIDIA's private
 * business; nothing here depends on it beyond "word 0 is the size". */
#define EXPORT_SLOTS 1024
static nvmlReturn_t export_not_supported(void) { return NVML_ERROR_NOT_SUPPORTED; }
static void *export_table[EXPORT_SLOTS];
API nvmlReturn_t nvmlInternalGetExportTable(const void **table, const void *uuid) {
    if (!table || !uuid) return NVML_ERROR_INVALID_ARGUMENT;
    export_table[0] = (void *)(unsigned long)sizeof(export_table);
    for (unsigned int i = 1; i < EXPORT_SLOTS; i++) export_table[i] = (void *)export_not_supported;
    *table = export_table;
    return NVML_SUCCESS;
}


typedef struct {
    unsigned int version, domain, bus, device, pciDeviceId, pciSubSystemId, baseClass, subClass;
    char busId[32];
} nvmlPciInfoExt_t;
API nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t d, nvmlPciInfoExt_t *pci) {
    nvmlPciInfo_t legacy;
    CHECK_DEV(d);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int version = pci->version;
    nvmlDeviceGetPciInfo_v3(d, &legacy);
    memset(pci, 0, sizeof(*pci));
    pci->version = version;
    pci->domain = legacy.domain;
    pci->bus = legacy.bus;
    pci->device = legacy.device;
    pci->pciDeviceId = legacy.pciDeviceId;
    pci->pciSubSystemId = legacy.pciSubSystemId;
    pci->baseClass = 0x03; /* display controller; 3D controller (0x02) as a data-centre GPU shows itself */
    pci->subClass = 0x02;
    memcpy(pci->busId, legacy.busId, sizeof(pci->busId));
    return NVML_SUCCESS;
}

/* Field values: every field is answered NOT_SUPPORTED in its own nvmlReturn, the call itself succeeding (nvml.h:
 * "NVML_SUCCESS if any values in values were populated"; each value's nvmlReturn "must be checked before looking at
 * value"). Failing the whole call instead left nvidia-smi 535 printing whatever its stack held as power limits. */
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    unsigned long long value;
} nvmlFieldValue_t;
API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values) {
    CHECK_DEV(d);
    if (count < 0 || (count > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) {
        values[i].timestamp = values[i].latencyUsec = 0;
        values[i].valueType = 0;
        values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        values[i].value = 0;
    }
    return NVML_SUCCESS;
}

/* Events: a set can be made and waited on, but no device has any event to register (as on a GPU where
 * nvmlDeviceGetSupportedEventTypes reports none). */
typedef struct nvmlEventSet_st *nvmlEventSet_t;
struct nvmlEventSet_st { int unused; };
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    CHECK_INIT();
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof(struct nvmlEventSet_st));
    return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { CHECK_INIT(); free(set); return NVML_SUCCESS; }
API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    CHECK_DEV(d);
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    *types = 0;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    CHECK_DEV(d);
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    return types ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}
API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    CHECK_INIT();
    if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    (void)timeout_ms;
    return 10; /* NVML_ERROR_TIMEOUT: nothing happened */
}
API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) { return nvmlEventSetWait_v2(set, data, timeout_ms); }

/* Topology and NVLink: what NVIDIA's device plugin asks when it picks devices for a pod (GetPreferredAllocation in
 * k8s-device-plugin v0.20.0 runs go-gpuallocator, vendor/github.com/NVIDIA/go-gpuallocator/internal/links/device.go:
 * GetP2PLink calls nvmlDeviceGetTopologyCommonAncestor for every pair of GPUs, getAllNvLinkRemotePciInfo
 * nvmlDeviceGetNvLinkState and nvmlDeviceGetNvLinkRemotePciInfo(_v2) for links 0..17, skipping a link that answers
 * NOT_SUPPORTED or INVALID_ARGUMENT) and what its device list reports (internal/rm/nvml_devices.go reads the NUMA
 * node from sysfs; nvmlDeviceGetNumaNodeId is NVML's own answer, which discovery reads). Levels and the enable
 * state are nvml.h's. A MIG device answers for its GPU. */
enum {
    NVML_TOPOLOGY_INTERNAL = 0, NVML_TOPOLOGY_SINGLE = 10, NVML_TOPOLOGY_MULTIPLE = 20, NVML_TOPOLOGY_HOSTBRIDGE = 30,
    NVML_TOPOLOGY_NODE = 40, NVML_TOPOLOGY_SYSTEM = 50,
};
#define NVML_NVLINK_MAX_LINKS 18
static struct nvmlDevice_st *gpu_of(nvmlDevice_t d) {
    if (IS_MIG(d)) return d->parent < device_count ? &devices[d->parent] : NULL;
    return (d && d >= devices && d < devices + device_count) ? d : NULL;
}
API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int *level) {
    CHECK_INIT();
    struct nvmlDevice_st *x = gpu_of(a), *y = gpu_of(b);
    if (!x || !y || !level) return NVML_ERROR_INVALID_ARGUMENT;
    if (x->lost || y->lost) return NVML_ERROR_GPU_IS_LOST;
    if (x == y) *level = NVML_TOPOLOGY_INTERNAL;
    else if (x->pcie_switch >= 0 && x->pcie_switch == y->pcie_switch) *level = NVML_TOPOLOGY_SINGLE;
    else if (x->numa == y->numa) *level = NVML_TOPOLOGY_NODE; /* one CPU's root complex, different host bridges */
    else *level = NVML_TOPOLOGY_SYSTEM; /* across the CPUs' interconnect */
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node) {
    CHECK_INIT();
    struct nvmlDevice_st *x = gpu_of(d);
    if (!x || !node) return NVML_ERROR_INVALID_ARGUMENT;
    if (x->numa < 0) return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned int)x->numa;
    return NVML_SUCCESS;
}
/* A PCIe board (no "nvlinks") answers NOT_SUPPORTED for every link, as real PCIe boards do; with links, the ones past
 * the last answer INVALID_ARGUMENT. */
static nvmlReturn_t nvlink(nvmlDevice_t d, unsigned int link, struct nvmlDevice_st **x) {
    CHECK_INIT();
    *x = gpu_of(d);
    if (!*x) return NVML_ERROR_INVALID_ARGUMENT;
    if ((*x)->lost) return NVML_ERROR_GPU_IS_LOST;
    if (!(*x)->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (*x)->nvlink_count || link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, int *active) {
    struct nvmlDevice_st *x;
    nvmlReturn_t rc = nvlink(d, link, &x);
    if (rc != NVML_SUCCESS) return rc;
    if (!active) return NVML_ERROR_INVALID_ARGUMENT;
    *active = 1; /* NVML_FEATURE_ENABLED */
    return NVML_SUCCESS;
}
/* nvmlNvLinkCapability_t: 0 P2P supported, 1 sysmem access, 2 P2P atomics, 3 sysmem atomics, 4 SLI bridge, 5 valid. */
API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t d, unsigned int link, int capability, unsigned int *result) {
    struct nvmlDevice_st *x;
    nvmlReturn_t rc = nvlink(d, link, &x);
    if (rc != NVML_SUCCESS) return rc;
    if (!result || capability < 0 || capability > 5) return NVML_ERROR_INVALID_ARGUMENT;
    *result = capability == 4 ? 0 : 1;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci) {
    struct nvmlDevice_st *x;
    nvmlReturn_t rc = nvlink(d, link, &x);
    if (rc != NVML_SUCCESS) return rc;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlDevice_t peer = NULL;
    if (nvmlDeviceGetHandleByPciBusId_v2(x->nvlink_peer[link], &peer) == NVML_SUCCESS) return nvmlDeviceGetPciInfo_v3(peer, pci);
    /* A peer that is no GPU of this node (an NVSwitch): its bus id, no device ids. */
    unsigned int dom = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(x->nvlink_peer[link], "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) return NVML_ERROR_UNKNOWN;
    memset(pci, 0, sizeof(*pci));
    pci->domain = dom; pci->bus = bus; pci->device = dev;
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", dom & 0xffff, bus, dev, fn);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", dom, bus, dev, fn);
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(d, link, pci);
}

/* What nvidia-smi's default table, -L, --query-gpu and -q ask for beyond discovery's needs. A GPU's
 * state that the simulation does not have (clocks, temperatures, power, ECC, PCIe link, inforom, ...)
 * answers NVML_ERROR_NOT_SUPPORTED, which nvidia-smi prints as "N/A" as it does on real boards that
 * lack the sensor. Declarations follow nvml.h (go-nvml gen/nvml/nvml.h at 2f9e261f, CUDA 13 era; these
 * entry points are unchanged since the 535 branch), with enums as int and pointers to structures the
 * stub never fills as void *, which is the same ABI. */
typedef int nvmlEnableState_t;
static nvmlReturn_t put_uint(nvmlDevice_t d, void *out, unsigned int value) {
    CHECK_ANY(d);
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *(unsigned int *)out = value;
    return NVML_SUCCESS;
}
/* No display is attached (data-centre use), compute mode Default, no virtualization (bare metal). */
API nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t d, nvmlEnableState_t *display) { return put_uint(d, display, 0); }
API nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t d, nvmlEnableState_t *active) { return put_uint(d, active, 0); }
/* Compute modes set through NVML (nvidia-smi -c; NVIDIA's MPS control daemon sets EXCLUSIVE_PROCESS that way) are kept
 * in "compute-mode" beside "mig-state" ("<uuid> <mode>" per GPU not in Default), so the next process sees them, as the
 * driver keeps a GPU's mode until a reboot or reset; inside a container (no state path) they last as long as the
 * process. Modes: 0 Default, 2 Prohibited, 3 Exclusive_Process; 1 (Exclusive_Thread) was removed from NVML (CUDA 8)
 * and is refused as NOT_SUPPORTED, as is a MIG device (its mode is its GPU's). Setting needs root, as NVIDIA's. */
static int compute_modes[MAX_GPUS];
static void compute_mode_path(char *out, size_t size) {
    const char *slash = strrchr(state_path, '/');
    snprintf(out, size, "%.*s/compute-mode", slash ? (int)(slash - state_path) : 1, slash ? state_path : ".");
}
static void compute_modes_load(void) {
    char path[4200], line[256], uuid[128];
    int mode;
    memset(compute_modes, 0, sizeof(compute_modes));
    if (!state_path[0]) return;
    compute_mode_path(path, sizeof(path));
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "%127s %d", uuid, &mode) != 2) continue;
        nvmlDevice_t d = device_by_uuid(uuid);
        if (d && !IS_MIG(d) && (mode == 2 || mode == 3)) compute_modes[d->index] = mode;
    }
    fclose(f);
}
API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, int *mode) {
    CHECK_ANY(d);
    compute_modes_load();
    return put_uint(d, mode, (unsigned int)compute_modes[IS_MIG(d) ? d->parent : d->index]);
}
API nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t d, int mode) {
    CHECK_ANY(d);
    if (IS_MIG(d) || mode == 1) return NVML_ERROR_NOT_SUPPORTED;
    if (mode != 0 && mode != 2 && mode != 3) return NVML_ERROR_INVALID_ARGUMENT;
    if (geteuid() != 0) return NVML_ERROR_NO_PERMISSION;
    compute_modes_load();
    compute_modes[d->index] = mode;
    if (!state_path[0]) return NVML_SUCCESS;
    char path[4200], tmp[4300];
    compute_mode_path(path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return NVML_ERROR_UNKNOWN;
    for (unsigned int i = 0; i < device_count; i++)
        if (compute_modes[i]) fprintf(f, "%s %d\n", devices[i].uuid, compute_modes[i]);
    if (fclose(f) != 0 || rename(tmp, path) != 0) { unlink(tmp); return NVML_ERROR_UNKNOWN; }
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t d, int *mode) { return put_uint(d, mode, 0); }
API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig) { return put_uint(d, is_mig, IS_MIG(d) ? 1 : 0); }

/* Health counters (see the header comment): NOT_SUPPORTED unless the node's gpus.json sets them. */
API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int errorType, int counterType, unsigned long long *count) {
    CHECK_DEV(d);
    if (!count || counterType < 0 || counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
    long long value = counterType == 0 ? d->ecc_volatile : d->ecc_aggregate;
    if (value < 0) return NVML_ERROR_NOT_SUPPORTED;
    *count = errorType == 1 ? (unsigned long long)value : 0; /* NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 */
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corr, unsigned int *unc, unsigned int *pending, unsigned int *failure) {
    CHECK_DEV(d);
    if (!corr || !unc || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->rows_corr < 0) return NVML_ERROR_NOT_SUPPORTED;
    *corr = (unsigned)d->rows_corr; *unc = (unsigned)d->rows_unc;
    *pending = (unsigned)d->rows_pending; *failure = (unsigned)d->rows_failure;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int *pending) {
    CHECK_DEV(d);
    if (d->retired_pending < 0) return NVML_ERROR_NOT_SUPPORTED;
    return put_uint(d, pending, (unsigned)d->retired_pending);
}
API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons) {
    CHECK_DEV(d);
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->clocks_reasons < 0) return NVML_ERROR_NOT_SUPPORTED;
    *reasons = (unsigned long long)d->clocks_reasons;
    return NVML_SUCCESS;
}
/* nvidia-smi prints a reason only when the supported mask has its bit: every reason nvml.h names (0x1ff). */
API nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons) {
    CHECK_DEV(d);
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->clocks_reasons < 0) return NVML_ERROR_NOT_SUPPORTED;
    *reasons = 0x1ffULL;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t d, unsigned long long *reasons) { return nvmlDeviceGetSupportedClocksEventReasons(d, reasons); }
API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *reasons) { return nvmlDeviceGetCurrentClocksEventReasons(d, reasons); }
API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int *mode) {
    CHECK_DEV(d);
    if (d->persistence < 0) return NVML_ERROR_NOT_SUPPORTED;
    return put_uint(d, mode, (unsigned)d->persistence);
}

#define NA(name, ...) API nvmlReturn_t name(__VA_ARGS__) { CHECK_INIT(); return NVML_ERROR_NOT_SUPPORTED; }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
NA(nvmlDeviceGetAccountingBufferSize, nvmlDevice_t device, unsigned int *bufferSize)
NA(nvmlDeviceGetAccountingMode, nvmlDevice_t device, void *mode)
NA(nvmlDeviceGetAccountingPids, nvmlDevice_t device, unsigned int *count, unsigned int *pids)
NA(nvmlDeviceGetApplicationsClock, nvmlDevice_t device, int clockType, unsigned int *clockMHz)
NA(nvmlDeviceGetAutoBoostedClocksEnabled, nvmlDevice_t device, void *isEnabled, void *defaultIsEnabled)
NA(nvmlDeviceGetBAR1MemoryInfo, nvmlDevice_t device, void *bar1Memory)
NA(nvmlDeviceGetBoardId, nvmlDevice_t device, unsigned int *boardId)
NA(nvmlDeviceGetBoardPartNumber, nvmlDevice_t device, char *partNumber, unsigned int length)
NA(nvmlDeviceGetBridgeChipInfo, nvmlDevice_t device, void *bridgeHierarchy)
NA(nvmlDeviceGetC2cModeInfoV, nvmlDevice_t device, void *c2cModeInfo)
NA(nvmlDeviceGetClock, nvmlDevice_t device, int clockType, int clockId, unsigned int *clockMHz)
NA(nvmlDeviceGetClockInfo, nvmlDevice_t device, int type, unsigned int *clock)
NA(nvmlDeviceGetConfComputeProtectedMemoryUsage, nvmlDevice_t device, void *memory)
NA(nvmlDeviceGetCurrPcieLinkGeneration, nvmlDevice_t device, unsigned int *currLinkGen)
NA(nvmlDeviceGetCurrPcieLinkWidth, nvmlDevice_t device, unsigned int *currLinkWidth)
NA(nvmlDeviceGetDecoderUtilization, nvmlDevice_t device, unsigned int *utilization, unsigned int *samplingPeriodUs)
NA(nvmlDeviceGetDefaultApplicationsClock, nvmlDevice_t device, int clockType, unsigned int *clockMHz)
NA(nvmlDeviceGetDriverModel, nvmlDevice_t device, void *current, void *pending)
NA(nvmlDeviceGetEccMode, nvmlDevice_t device, void *current, void *pending)
NA(nvmlDeviceGetEncoderUtilization, nvmlDevice_t device, unsigned int *utilization, unsigned int *samplingPeriodUs)
NA(nvmlDeviceGetEnforcedPowerLimit, nvmlDevice_t device, unsigned int *limit)
NA(nvmlDeviceGetFBCStats, nvmlDevice_t device, void *fbcStats)
NA(nvmlDeviceGetFanSpeed, nvmlDevice_t device, unsigned int *speed)
NA(nvmlDeviceGetGpuFabricInfo, nvmlDevice_t device, void *gpuFabricInfo)
NA(nvmlDeviceGetGpuFabricInfoV, nvmlDevice_t device, void *gpuFabricInfo)
NA(nvmlDeviceGetGpuMaxPcieLinkGeneration, nvmlDevice_t device, unsigned int *maxLinkGenDevice)
NA(nvmlDeviceGetGpuOperationMode, nvmlDevice_t device, void *current, void *pending)
NA(nvmlDeviceGetGridLicensableFeatures_v4, nvmlDevice_t device, void *pGridLicensableFeatures)
NA(nvmlDeviceGetGspFirmwareVersion, nvmlDevice_t device, char *version)
NA(nvmlDeviceGetInforomImageVersion, nvmlDevice_t device, char *version, unsigned int length)
NA(nvmlDeviceGetInforomVersion, nvmlDevice_t device, int object, char *version, unsigned int length)
NA(nvmlDeviceGetJpgUtilization, nvmlDevice_t device, unsigned int *utilization, unsigned int *samplingPeriodUs)
NA(nvmlDeviceGetLastBBXFlushTime, nvmlDevice_t device, unsigned long long *timestamp, unsigned long *durationUs)
NA(nvmlDeviceGetMaxClockInfo, nvmlDevice_t device, int type, unsigned int *clock)
NA(nvmlDeviceGetMaxPcieLinkGeneration, nvmlDevice_t device, unsigned int *maxLinkGen)
NA(nvmlDeviceGetMaxPcieLinkWidth, nvmlDevice_t device, unsigned int *maxLinkWidth)
NA(nvmlDeviceGetMemoryErrorCounter, nvmlDevice_t device, int errorType, int counterType, int locationType, unsigned long long *count)
NA(nvmlDeviceGetModuleId, nvmlDevice_t device, unsigned int *moduleId)
NA(nvmlDeviceGetMultiGpuBoard, nvmlDevice_t device, unsigned int *multiGpuBool)
NA(nvmlDeviceGetOfaUtilization, nvmlDevice_t device, unsigned int *utilization, unsigned int *samplingPeriodUs)
NA(nvmlDeviceGetPcieReplayCounter, nvmlDevice_t device, unsigned int *value)
NA(nvmlDeviceGetPcieThroughput, nvmlDevice_t device, int counter, unsigned int *value)
NA(nvmlDeviceGetPerformanceState, nvmlDevice_t device, void *pState)
NA(nvmlDeviceGetPowerState, nvmlDevice_t device, void *pState)
NA(nvmlDeviceGetPowerUsage, nvmlDevice_t device, unsigned int *power)
NA(nvmlDeviceGetRetiredPages, nvmlDevice_t device, int cause, unsigned int *pageCount, unsigned long long *addresses)
NA(nvmlDeviceGetRowRemapperHistogram, nvmlDevice_t device, void *values)
NA(nvmlDeviceGetSerial, nvmlDevice_t device, char *serial, unsigned int length)
NA(nvmlDeviceGetSramEccErrorStatus, nvmlDevice_t device, void *status)
NA(nvmlDeviceGetSupportedMemoryClocks, nvmlDevice_t device, unsigned int *count, unsigned int *clocksMHz)
NA(nvmlDeviceGetTemperature, nvmlDevice_t device, int sensorType, unsigned int *temp)
NA(nvmlDeviceGetTemperatureThreshold, nvmlDevice_t device, int thresholdType, unsigned int *temp)
NA(nvmlDeviceGetUtilizationRates, nvmlDevice_t device, void *utilization)
NA(nvmlDeviceGetVbiosVersion, nvmlDevice_t device, char *version, unsigned int length)
NA(nvmlDeviceGetVgpuHeterogeneousMode, nvmlDevice_t device, void *pHeterogeneousMode)
NA(nvmlDeviceValidateInforom, nvmlDevice_t device)
NA(nvmlDeviceGetEncoderStats, nvmlDevice_t device, unsigned int *sessionCount, unsigned int *averageFps, unsigned int *averageLatency)
NA(nvmlDeviceGetHostVgpuMode, nvmlDevice_t device, void *pHostVgpuMode)
#pragma GCC diagnostic pop
