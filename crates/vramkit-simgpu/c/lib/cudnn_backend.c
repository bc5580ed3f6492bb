/*
 * cuDNN's backend (graph) API as cudnn_frontend drives it, included by
 * cudnn.c. The frontend builds tensors, operations and an operation graph,
 * asks the heuristics for engine configurations, finalizes an execution
 * plan per configuration, reads the plan's workspace size, allocates that
 * through PyTorch's allocator and executes.
 *
 * Answers, by attribute (cudnnBackendAttributeName_t):
 *   heuristic results, a configuration's engine, a plan's configuration:
 *     one element (the descriptors are the caller's, created before the
 *     call; nothing in them needs filling here);
 *   knob choices and infos, numerical and behaviour notes, intermediates:
 *     none, so no engine is filtered out as non-deterministic, down-
 *     converting or needing tensor cores;
 *   the graph's engine count: 1; an engine's index and every size: 0;
 *   a plan's JSON: "{}";
 *   anything else: one zeroed element.
 * A count query (requestedElementCount 0) gets the number available; the
 * element count pointer may be null.
 */
enum {
  HEUR_RESULTS = 202,
  CFG_ENGINE = 300, CFG_INTERMEDIATE_INFO = 301, CFG_KNOB_CHOICES = 302, CFG_WORKSPACE_SIZE = 303,
  PLAN_ENGINE_CONFIG = 401, PLAN_WORKSPACE_SIZE = 402, PLAN_COMPUTED_INTERMEDIATES = 403, PLAN_RUN_ONLY_INTERMEDIATES = 404,
  PLAN_JSON = 405,
  GRAPH_ENGINE_GLOBAL_COUNT = 802,
  ENGINE_GLOBAL_INDEX = 1301, ENGINE_KNOB_INFO = 1302, ENGINE_NUMERICAL_NOTE = 1303, ENGINE_LAYOUT_INFO = 1304,
  ENGINE_BEHAVIOR_NOTE = 1305,
};
enum { TYPE_BOOLEAN = 2, TYPE_INT64 = 3, TYPE_DOUBLE = 5, TYPE_VOID_PTR = 6, TYPE_HANDLE = 0, TYPE_DESCRIPTOR = 15,
       TYPE_CHAR = 24, TYPE_FRACTION = 26 };

typedef struct { int type; } Backend;

STUB_EXPORT int cudnnBackendCreateDescriptor(int type, Backend **d) {
  *d = simgpu_object(sizeof(Backend));
  (*d)->type = type;
  return 0;
}
STUB_EXPORT int cudnnBackendDestroyDescriptor(Backend *d) { free(d); return 0; }
STUB_EXPORT int cudnnBackendInitialize(Backend *d) { return 0; }
STUB_EXPORT int cudnnBackendFinalize(Backend *d) { return 0; }
STUB_EXPORT int cudnnBackendSetAttribute(Backend *d, int name, int type, int64_t count, const void *elements) {
  return 0;
}
STUB_EXPORT int cudnnBackendExecute(void *handle, Backend *plan, Backend *variant_pack) {
  count_execution();
  return 0;
}

static size_t element_bytes(int type) {
  switch (type) {
    case TYPE_HANDLE: case TYPE_INT64: case TYPE_DOUBLE: case TYPE_VOID_PTR: return 8;
    case TYPE_BOOLEAN: case TYPE_CHAR: return 1;
    case TYPE_FRACTION: return 16;
    case TYPE_DESCRIPTOR: return 0; /* the caller's descriptors: left as they are */
    default: return 4;              /* enums, FLOAT, INT32 */
  }
}

STUB_EXPORT int cudnnBackendGetAttribute(const Backend *d, int name, int type, int64_t requested, int64_t *count,
                                         void *elements) {
  int64_t available = 1;
  int64_t value = 0;
  switch (name) {
    case CFG_KNOB_CHOICES: case CFG_INTERMEDIATE_INFO: case ENGINE_KNOB_INFO: case ENGINE_NUMERICAL_NOTE:
    case ENGINE_LAYOUT_INFO: case ENGINE_BEHAVIOR_NOTE: case PLAN_COMPUTED_INTERMEDIATES: case PLAN_RUN_ONLY_INTERMEDIATES:
      available = 0;
      break;
    case GRAPH_ENGINE_GLOBAL_COUNT:
      value = 1;
      break;
    case PLAN_JSON:
      available = 3;
      break;
    default:
      break;
  }
  int64_t given = requested < available ? requested : available;
  if (count) *count = requested == 0 ? available : given;
  if (elements && given > 0) {
    if (name == PLAN_JSON && type == TYPE_CHAR) memcpy(elements, "{}", (size_t)given);
    else if (type == TYPE_INT64) *(int64_t *)elements = value;
    else memset(elements, 0, (size_t)given * element_bytes(type));
  }
  simgpu_trace("cudnnBackendGetAttribute(descriptor type %d, attribute %d, type %d, requested %lld) -> %lld",
               d ? d->type : -1, name, type, (long long)requested, (long long)(count ? *count : given));
  return 0;
}
