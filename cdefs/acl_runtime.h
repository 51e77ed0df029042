/* The small part of the ACL base, runtime and model API that profiling needs.
 *
 * Same rules as acl_base.h. Prototypes follow CANN's acl.h, acl_rt.h and acl_mdl.h.
 */

typedef struct aclmdlDataset aclmdlDataset;
typedef struct aclDataBuffer aclDataBuffer;

/* GE codes that aclmdlExecute passes through unchanged (GE inc/external/ge/ge_error_codes.h;
 * ACL_GET_ERRCODE_GE keeps every code in [145000, 545999]). */
#define ACL_ERROR_GE_PARAM_INVALID 145000
#define ACL_ERROR_GE_EXEC_MODEL_ID_INVALID 145003

aclError aclInit(const char *configPath);
aclError aclFinalize(void);

aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtGetDevice(int32_t *deviceId);
aclError aclrtGetDeviceCount(uint32_t *count);
aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId);
aclError aclrtDestroyContext(aclrtContext context);
aclError aclrtSetCurrentContext(aclrtContext context);
aclError aclrtGetCurrentContext(aclrtContext *context);
aclError aclrtCreateStream(aclrtStream *stream);
aclError aclrtDestroyStream(aclrtStream stream);
aclError aclrtSynchronizeStream(aclrtStream stream);
aclError aclrtSynchronizeDevice(void);

aclError aclmdlLoadFromFile(const char *modelPath, uint32_t *modelId);
aclError aclmdlExecute(uint32_t modelId, const aclmdlDataset *input, aclmdlDataset *output);
aclError aclmdlUnload(uint32_t modelId);

/* Datasets (GE acl_mdl.h) and data buffers (runtime acl_base_rt.h), prototypes as in CANN.
 * aclmdlCreateDataset is declared `()` there too. */
aclDataBuffer *aclCreateDataBuffer(void *data, size_t size);
aclError aclDestroyDataBuffer(const aclDataBuffer *dataBuffer);
aclmdlDataset *aclmdlCreateDataset();
aclError aclmdlDestroyDataset(const aclmdlDataset *dataset);
aclError aclmdlAddDatasetBuffer(aclmdlDataset *dataset, aclDataBuffer *dataBuffer);
size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset *dataset);
