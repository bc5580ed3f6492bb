/*
 * cuDNN's RNN API (v8), included by cudnn.c: what PyTorch needs to lay its
 * LSTM/GRU/RNN weights into cuDNN's one weight buffer and to size the
 * buffers of a training step.
 *
 * The weight space holds, per pseudo-layer (layer x direction), the input
 * matrices of every gate, then the recurrent ones, then (LSTM with
 * projection) the projection, then the biases in the same order: the
 * layout PyTorch checks offset by offset. The reserve space a training
 * forward keeps for the backward is an estimate (gates and states of every
 * step): the real size depends on the algorithm cuDNN picks.
 */
enum { CELL_RNN_RELU, CELL_RNN_TANH, CELL_LSTM, CELL_GRU };
enum { BIAS_NONE, BIAS_SINGLE_INPUT, BIAS_DOUBLE, BIAS_SINGLE_RECURRENT };

typedef struct {
  int cell, bias, bidirectional, data_type;
  int input, hidden, projection, layers;
} Rnn;
typedef struct { int max_seq, batch; } RnnData;

STUB_EXPORT int cudnnCreateRNNDescriptor(Rnn **d) { *d = simgpu_object(sizeof(Rnn)); return 0; }
STUB_EXPORT int cudnnDestroyRNNDescriptor(Rnn *d) { free(d); return 0; }
STUB_EXPORT int cudnnCreateRNNDataDescriptor(RnnData **d) { *d = simgpu_object(sizeof(RnnData)); return 0; }
STUB_EXPORT int cudnnDestroyRNNDataDescriptor(RnnData *d) { free(d); return 0; }
STUB_EXPORT int cudnnSetRNNDescriptor_v8(Rnn *d, int algo, int cell, int bias, int direction, int input_mode, int data_type,
                                         int math_precision, int math_type, int32_t input, int32_t hidden,
                                         int32_t projection, int32_t layers, void *dropout, uint32_t flags) {
  *d = (Rnn){cell, bias, direction == 1, data_type, input, hidden, projection, layers};
  return 0;
}
STUB_EXPORT int cudnnSetRNNDataDescriptor(RnnData *d, int data_type, int layout, int max_seq, int batch, int vector,
                                          const int *lengths, void *padding) {
  d->max_seq = max_seq;
  d->batch = batch;
  return 0;
}

static size_t element_size(int data_type) {
  switch (data_type) {
    case 1: return 8;           /* DOUBLE */
    case 2: case 9: return 2;   /* HALF, BFLOAT16 */
    default: return 4;          /* FLOAT */
  }
}
static int gates(const Rnn *r) { return r->cell == CELL_LSTM ? 4 : r->cell == CELL_GRU ? 3 : 1; }
static int directions(const Rnn *r) { return r->bidirectional ? 2 : 1; }
static int64_t recurrent_size(const Rnn *r) { return r->projection ? r->projection : r->hidden; }
static int biases(const Rnn *r) { return r->bias == BIAS_DOUBLE ? 2 : r->bias == BIAS_NONE ? 0 : 1; }

/* Where pseudo-layer `p`'s parameters start, and how many elements they
 * take; the input width of its matrices. */
static int64_t layer_input(const Rnn *r, int p) { return p / directions(r) == 0 ? r->input : recurrent_size(r) * directions(r); }
static int64_t layer_elements(const Rnn *r, int p) {
  int64_t h = r->hidden, n = gates(r);
  int64_t projection = r->projection ? (int64_t)r->projection * h : 0;
  return n * h * layer_input(r, p) + n * h * recurrent_size(r) + projection + biases(r) * n * h;
}
static int64_t layer_start(const Rnn *r, int p) {
  int64_t at = 0;
  for (int i = 0; i < p; i++) at += layer_elements(r, i);
  return at;
}

STUB_EXPORT int cudnnGetRNNWeightSpaceSize(void *handle, const Rnn *r, size_t *bytes) {
  *bytes = (size_t)layer_start(r, r->layers * directions(r)) * element_size(r->data_type);
  return 0;
}

static void describe(Legacy *d, int type, int rows, int cols) {
  const int dims[3] = {1, rows, cols}, strides[3] = {rows * cols, cols, 1};
  if (d) cudnnSetTensorNdDescriptor(d, type, 3, dims, strides);
}

/* Linear layer `id`: 0..n-1 input matrices, n..2n-1 recurrent ones, and
 * for an LSTM with projection, 8 the projection. Callers pass null for the
 * half (matrix or bias) they do not want. */
STUB_EXPORT int cudnnGetRNNWeightParams(void *handle, const Rnn *r, int32_t p, size_t space_bytes, const void *space,
                                        int32_t id, Legacy *matrix, void **matrix_at, Legacy *bias, void **bias_at) {
  const int n = gates(r);
  const int64_t h = r->hidden, in = layer_input(r, p), rec = recurrent_size(r);
  const size_t e = element_size(r->data_type);
  const char *base = (const char *)space + layer_start(r, p) * (int64_t)e;
  const int64_t matrices = n * h * in + n * h * rec;
  const int64_t projection = r->projection ? (int64_t)r->projection * h : 0;
  if (p < 0 || p >= r->layers * directions(r) || id < 0 || id > 2 * n || (id == 2 * n && !r->projection)) return 3; /* BAD_PARAM */
  if (id == 2 * n) {
    if (matrix_at) *matrix_at = (void *)(base + matrices * (int64_t)e);
    describe(matrix, r->data_type, r->projection, (int)h);
    if (bias_at) *bias_at = NULL;
    return 0;
  }
  int64_t offset = id < n ? id * h * in : n * h * in + (id - n) * h * rec;
  if (matrix_at) *matrix_at = (void *)(base + offset * (int64_t)e);
  describe(matrix, r->data_type, (int)h, (int)(id < n ? in : rec));
  int slot = biases(r) == 2 ? id : biases(r) == 1 && ((r->bias == BIAS_SINGLE_INPUT) == (id < n)) ? id % n : -1;
  if (bias_at) *bias_at = slot < 0 ? NULL : (void *)(base + (matrices + projection + slot * h) * (int64_t)e);
  if (slot >= 0) describe(bias, r->data_type, (int)h, 1);
  return 0;
}

STUB_EXPORT int cudnnGetRNNTempSpaceSizes(void *handle, const Rnn *r, int mode, const RnnData *x, size_t *work,
                                          size_t *reserve) {
  *work = 0;
  if (reserve) {
    /* Training (mode 1) keeps every step's gates and states. */
    int64_t per_step = (int64_t)(gates(r) + 2) * r->hidden * r->layers * directions(r);
    *reserve = mode == 1 ? (size_t)(per_step * x->max_seq * x->batch) * element_size(r->data_type) : 0;
  }
  return 0;
}
