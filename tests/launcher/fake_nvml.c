/* A stand-in for NVIDIA's libnvidia-ml.so.1 (tests/launcher/health_test.py): the health gate
 * loads it through LD_LIBRARY_PATH as it would the real one. Its GPUs and their states come from
 * DDPRUN_FAKE_NVML, one word per GPU, comma-separated: ok, lost (its handle query fails with
 * NVML_ERROR_GPU_IS_LOST), pending (page retirements pending), ecc (uncorrectable ECC errors).
 * Unset: NVML does not initialise (no driver). */
#include <stdlib.h>
#include <string.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST 15
#define MAX_GPUS 16

static char states[MAX_GPUS][16];
static unsigned count;

static int load(void) {
  const char *spec = getenv("DDPRUN_FAKE_NVML");
  if (spec == NULL) return 0;
  count = 0;
  while (*spec != '\0' && count < MAX_GPUS) {
    size_t length = strcspn(spec, ",");
    if (length >= sizeof states[0]) length = sizeof states[0] - 1;
    memcpy(states[count], spec, length);
    states[count][length] = '\0';
    ++count;
    spec += strcspn(spec, ",");
    if (*spec == ',') ++spec;
  }
  return 1;
}

int nvmlInit_v2(void) { return load() ? NVML_SUCCESS : NVML_ERROR_DRIVER_NOT_LOADED; }
int nvmlShutdown(void) { return NVML_SUCCESS; }

const char *nvmlErrorString(int result) {
  return result == NVML_ERROR_GPU_IS_LOST ? "GPU is lost" : "Unknown Error";
}

int nvmlDeviceGetCount_v2(unsigned *deviceCount) {
  *deviceCount = count;
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device) {
  if (index >= count) return NVML_ERROR_INVALID_ARGUMENT;
  if (strcmp(states[index], "lost") == 0) return NVML_ERROR_GPU_IS_LOST;
  *device = states[index];
  return NVML_SUCCESS;
}

int nvmlDeviceGetRetiredPagesPendingStatus(void *device, int *isPending) {
  *isPending = strcmp((const char *)device, "pending") == 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetTotalEccErrors(void *device, int errorType, int counterType,
                                unsigned long long *eccCounts) {
  (void)errorType;
  (void)counterType;
  *eccCounts = strcmp((const char *)device, "ecc") == 0 ? 2 : 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned *infoCount, void *infos) {
  (void)device;
  (void)infos;
  *infoCount = 0;
  return NVML_SUCCESS;
}
