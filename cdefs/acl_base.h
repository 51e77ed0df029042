/* Base ACL types and the error codes the profiling API returns.
 *
 * Plain C declarations, read by two consumers that must agree:
 *   - cdefs/build_ffi.py feeds this file to cffi's cdef() (out-of-line ABI mode), and
 *   - mock_acl/src/mock_internal.h #includes it, so the compiler checks the mock against it.
 * Rules for this directory: no #include, no #if/#ifdef, no include guards, only integer
 * #defines (cffi's cdef parser accepts nothing else). Values follow CANN's acl_base_rt.h.
 */

typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtContext;

#define ACL_SUCCESS 0
#define ACL_ERROR_NONE 0
#define ACL_ERROR_INVALID_PARAM 100000
#define ACL_ERROR_UNINITIALIZE 100001
#define ACL_ERROR_REPEAT_INITIALIZE 100002
#define ACL_ERROR_INVALID_FILE 100003
#define ACL_ERROR_INVALID_PROFILING_CONFIG 100010
#define ACL_ERROR_INVALID_MODEL_ID 100011
#define ACL_ERROR_REPEAT_FINALIZE 100037
#define ACL_ERROR_PROF_ALREADY_RUN 100042
#define ACL_ERROR_PROF_NOT_RUN 100043
#define ACL_ERROR_PROF_REPEAT_SUBSCRIBE 148046
#define ACL_ERROR_PROF_API_CONFLICT 148047
#define ACL_ERROR_BAD_ALLOC 200000
#define ACL_ERROR_API_NOT_SUPPORT 200001
#define ACL_ERROR_FEATURE_UNSUPPORTED 200006
#define ACL_ERROR_PROF_MODULES_UNSUPPORTED 200007
#define ACL_ERROR_INTERNAL_ERROR 500000
#define ACL_ERROR_FAILURE 500001
#define ACL_ERROR_GE_FAILURE 500002
#define ACL_ERROR_PROFILING_FAILURE 500005
