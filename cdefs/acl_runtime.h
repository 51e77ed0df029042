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

/* AI Core exceptions (issue 24). Prototypes and values as in CANN: runtime
 * include/external/acl/acl_rt.h (callback and getters), acl_base_rt.h (aclDataType,
 * aclFormat), error_codes/rt_error_codes.h; GE inc/external/acl/acl_mdl.h
 * (aclmdlCreateAndGetOpDesc) and acl_base.h (the tensor description getters). Sources and
 * commits: mock_acl/README.md, "AI Core exceptions". */
#define ACL_ERROR_RT_PARAM_INVALID 107000
#define ACL_ERROR_RT_MODEL_EXECUTE 507011
#define ACL_ERROR_RT_AICORE_TIMEOUT 507014
#define ACL_ERROR_RT_AICORE_EXCEPTION 507015
#define ACL_ERROR_RT_AICORE_TRAP_EXCEPTION 507016

typedef struct rtExceptionInfo aclrtExceptionInfo;
typedef void (*aclrtExceptionInfoCallback)(aclrtExceptionInfo *exceptionInfo);
typedef struct aclTensorDesc aclTensorDesc;

typedef enum {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_STRING = 13,
    ACL_COMPLEX64 = 16,
    ACL_COMPLEX128 = 17,
    ACL_BF16 = 27,
    ACL_INT4 = 29,
    ACL_UINT1 = 30,
    ACL_COMPLEX32 = 33,
    ACL_HIFLOAT8 = 34,
    ACL_FLOAT8_E5M2 = 35,
    ACL_FLOAT8_E4M3FN = 36,
    ACL_FLOAT8_E8M0 = 37,
    ACL_FLOAT6_E3M2 = 38,
    ACL_FLOAT6_E2M3 = 39,
    ACL_FLOAT4_E2M1 = 40,
    ACL_FLOAT4_E1M2 = 41
} aclDataType;

typedef enum {
    ACL_FORMAT_UNDEFINED = -1,
    ACL_FORMAT_NCHW = 0,
    ACL_FORMAT_NHWC = 1,
    ACL_FORMAT_ND = 2,
    ACL_FORMAT_NC1HWC0 = 3,
    ACL_FORMAT_FRACTAL_Z = 4,
    ACL_FORMAT_NC1HWC0_C04 = 12,
    ACL_FORMAT_HWCN = 16,
    ACL_FORMAT_NDHWC = 27,
    ACL_FORMAT_FRACTAL_NZ = 29,
    ACL_FORMAT_NCDHW = 30,
    ACL_FORMAT_NDC1HWC0 = 32,
    ACL_FRACTAL_Z_3D = 33,
    ACL_FORMAT_NC = 35,
    ACL_FORMAT_NCL = 47
} aclFormat;

/* Deprecated in CANN in favour of Register/Unregister, still the one the pyACL documents use:
 * one process-wide slot, the last call wins, NULL clears it. */
aclError aclrtSetExceptionInfoCallback(aclrtExceptionInfoCallback callback);
/* Newer CANN: any number of callbacks, keyed by function pointer (absent from older CANN:
 * the loader treats them as optional). */
aclError aclrtExceptionInfoCallbackRegister(aclrtExceptionInfoCallback callback);
aclError aclrtExceptionInfoCallbackUnregister(aclrtExceptionInfoCallback callback);
/* 0xFFFFFFFF when info is NULL. */
uint32_t aclrtGetTaskIdFromExceptionInfo(const aclrtExceptionInfo *info);
uint32_t aclrtGetStreamIdFromExceptionInfo(const aclrtExceptionInfo *info);
uint32_t aclrtGetThreadIdFromExceptionInfo(const aclrtExceptionInfo *info);
uint32_t aclrtGetDeviceIdFromExceptionInfo(const aclrtExceptionInfo *info);
uint32_t aclrtGetErrorCodeFromExceptionInfo(const aclrtExceptionInfo *info);

aclError aclmdlCreateAndGetOpDesc(uint32_t deviceId, uint32_t streamId, uint32_t taskId,
                                  char *opName, size_t opNameLen, aclTensorDesc **inputDesc,
                                  size_t *numInputs, aclTensorDesc **outputDesc,
                                  size_t *numOutputs);
aclTensorDesc *aclGetTensorDescByIndex(aclTensorDesc *desc, size_t index);
void *aclGetTensorDescAddress(const aclTensorDesc *desc);
aclDataType aclGetTensorDescType(const aclTensorDesc *desc);
aclFormat aclGetTensorDescFormat(const aclTensorDesc *desc);
size_t aclGetTensorDescNumDims(const aclTensorDesc *desc);
aclError aclGetTensorDescDimV2(const aclTensorDesc *desc, size_t index, int64_t *dimSize);
void aclDestroyTensorDesc(const aclTensorDesc *desc);
