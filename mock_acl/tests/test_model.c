/* The model runtime: model files (aclmdlLoadFromFile) and the datasets of aclmdlExecute
 * (src/model.c, model_file.c, model_dataset.c).
 */
#include "test_subscribe_common.h"

TEST(load_errors)
{
    uint32_t id = 0;
    CHECK_EQ(aclmdlLoadFromFile(NULL, &id), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlLoadFromFile(tmp_path("x"), NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlLoadFromFile(tmp_path("does-not-exist"), &id), ACL_ERROR_INVALID_FILE);
    CHECK_EQ(aclmdlLoadFromFile(g_dir, &id), ACL_ERROR_INVALID_FILE);   /* a directory */

    static const char *const bad[] = {
        "",                                                   /* empty */
        "aclmock-model 2\n",                                  /* version */
        "aclmock-model 1 \n",                                 /* trailing space */
        "# comment first\naclmock-model 1\n",                 /* magic must be line 1 */
        "aclmock-model 1\nop\ta\tb\n",                        /* no duration */
        "aclmock-model 1\nop\ta\tb\t1\t2\t3\t4\t5\n",         /* too many fields */
        "aclmock-model 1\nop\ta\tb\t-1\n",                    /* sign */
        "aclmock-model 1\nop\ta\tb\t1x\n",
        "aclmock-model 1\nop\ta\tb\t1000000000001\n",         /* > 1000 s */
        "aclmock-model 1\nop\ta\tb\t1\t1\t4294967296\n",      /* flag > uint32 */
        "aclmock-model 1\nop\ta\\q\tb\t1\n",                  /* unknown escape */
        "aclmock-model 1\nop\ta\\\tb\t1\n",                   /* backslash before TAB */
        "aclmock-model 1\nop\ta\\x0\tb\t1\n",                 /* short \x */
        "aclmock-model 1\nop\ta\\x00\tb\t1\n",                /* NUL in a name */
        "aclmock-model 1\nop\ta\\xg1\tb\t1\n",
        "aclmock-model 1\nop a b 1\n",                        /* spaces, not TABs */
        "aclmock-model 1\ndevice 8\n",                        /* default device count 8 */
        "aclmock-model 1\ndevice 1\ndevice 1\n",              /* repeated */
        "aclmock-model 1\ndevice\n",
        "aclmock-model 1\nbogus 1\n",
        "aclmock-model 1\ngap x\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        aclError r = load_text(bad[i], &id);
        if (r != ACL_ERROR_INVALID_FILE)
            fprintf(stderr, "bad model %zu loaded: %d\n", i, r);
        CHECK_EQ(r, ACL_ERROR_INVALID_FILE);
    }
    /* A raw NUL byte anywhere is refused too. */
    static const char nul[] = "aclmock-model 1\nop\ta\0b\tc\t1\n";
    write_text(tmp_path("nul.txt"), nul, sizeof nul - 1);
    CHECK_EQ(aclmdlLoadFromFile(tmp_path("nul.txt"), &id), ACL_ERROR_INVALID_FILE);

    /* device must be below the driver's device count at load time. */
    CHECK_EQ(aclmockSetDeviceCount(2), ACL_SUCCESS);
    CHECK_EQ(load_text("aclmock-model 1\ndevice 2\n", &id), ACL_ERROR_INVALID_FILE);
    CHECK_EQ(load_text("aclmock-model 1\ndevice 1\n", &id), ACL_SUCCESS);
}

TEST(load_accepts_and_ids)
{
    uint32_t a = 0, b = 0, c = 0, d = 0;
    /* CRLF, comments, blank lines, no ops, no trailing newline, raw non-UTF-8 bytes. */
    CHECK_EQ(load_text("aclmock-model 1\r\n# c\r\n\r\nop\t\xc3\x28\tT\t1\r\n", &a), ACL_SUCCESS);
    CHECK_EQ(load_text("aclmock-model 1", &b), ACL_SUCCESS);
    CHECK_EQ(a, 1);   /* ids start at 1 after aclmockReset */
    CHECK_EQ(b, 2);
    CHECK_EQ(aclmdlUnload(b), ACL_SUCCESS);
    CHECK_EQ(aclmdlUnload(b), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(load_text("aclmock-model 1\n", &c), ACL_SUCCESS);
    CHECK_EQ(c, 3);   /* never reused */
    CHECK_EQ(execute_empty(b), ACL_ERROR_GE_EXEC_MODEL_ID_INVALID);
    CHECK_EQ(execute_empty(a), ACL_SUCCESS);
    CHECK_EQ(execute_empty(c), ACL_SUCCESS);   /* no ops: nothing happens */
    aclmockReset();
    CHECK_EQ(load_text("aclmock-model 1\n", &d), ACL_SUCCESS);
    CHECK_EQ(d, 1);
    CHECK_EQ(execute_empty(a + 1000), ACL_ERROR_GE_EXEC_MODEL_ID_INVALID);
}

TEST(execute_needs_datasets)
{
    uint32_t model = 0;
    REQUIRE(load_text("aclmock-model 1\nop\ta\tA\t100\nop\tb\tB\t200\n", &model) == ACL_SUCCESS);
    make_pipe(0);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    aclmdlDataset *in = aclmdlCreateDataset(), *out = aclmdlCreateDataset();
    REQUIRE(in != NULL && out != NULL);
    CHECK_EQ(aclmdlGetDatasetNumBuffers(in), 0);
    CHECK_EQ(stats().datasetsInUse, 2);

    /* NULL datasets are rejected before the model id is looked at, as GE does. */
    CHECK_EQ(aclmdlExecute(model, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model, in, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model, NULL, out), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model + 1000, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model + 1000, in, out), ACL_ERROR_GE_EXEC_MODEL_ID_INVALID);
    CHECK_EQ(stats().recordsEmitted, 0);   /* none of them ran the model */

    CHECK_EQ(aclmdlExecute(model, in, out), ACL_SUCCESS);
    CHECK_EQ(stats().recordsEmitted, 2);

    /* The models have no inputs or outputs: any buffer is a count mismatch (GE 145000),
     * found after the model id. */
    static char host[16];
    aclDataBuffer *b = aclCreateDataBuffer(host, sizeof host);
    REQUIRE(b != NULL);
    CHECK_EQ(stats().dataBuffersInUse, 1);
    CHECK_EQ(aclmdlAddDatasetBuffer(NULL, b), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlAddDatasetBuffer(in, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlAddDatasetBuffer(in, b), ACL_SUCCESS);
    CHECK_EQ(aclmdlGetDatasetNumBuffers(in), 1);
    CHECK_EQ(aclmdlGetDatasetNumBuffers(NULL), 0);
    CHECK_EQ(aclmdlExecute(model, in, out), ACL_ERROR_GE_PARAM_INVALID);
    CHECK_EQ(aclmdlExecute(model + 1000, in, out), ACL_ERROR_GE_EXEC_MODEL_ID_INVALID);
    CHECK_EQ(stats().recordsEmitted, 2);

    /* An output buffer without memory makes a synchronous execute ask the model for that
     * output's size: 100000 here, before the model id. */
    aclmdlDataset *empty = aclmdlCreateDataset(), *out2 = aclmdlCreateDataset();
    aclDataBuffer *nodata = aclCreateDataBuffer(NULL, 0);
    REQUIRE(empty != NULL && out2 != NULL && nodata != NULL);
    CHECK_EQ(aclmdlAddDatasetBuffer(out2, nodata), ACL_SUCCESS);
    CHECK_EQ(aclmdlExecute(model, empty, out2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model + 1000, empty, out2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(stats().recordsEmitted, 2);

    /* Destroying a dataset leaves its buffers to the caller; destroyed or foreign handles
     * are rejected (the mock's handle registries). */
    CHECK_EQ(aclmdlDestroyDataset(in), ACL_SUCCESS);
    CHECK_EQ(stats().datasetsInUse, 3);
    CHECK_EQ(stats().dataBuffersInUse, 2);
    CHECK_EQ(aclmdlDestroyDataset(in), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlDestroyDataset(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model, in, out), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlGetDatasetNumBuffers(in), 0);
    CHECK_EQ(aclmdlAddDatasetBuffer((aclmdlDataset *)host, b), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclDestroyDataBuffer(b), ACL_SUCCESS);
    CHECK_EQ(aclDestroyDataBuffer(b), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclDestroyDataBuffer(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlAddDatasetBuffer(out, b), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlDestroyDataset(out2), ACL_SUCCESS);
    CHECK_EQ(aclDestroyDataBuffer(nodata), ACL_SUCCESS);

    /* Fault injection covers the new functions; aclmockReset leaves the caller's objects. */
    CHECK_EQ(aclmockFailNext("aclmdlCreateDataset", 1, 500001), ACL_SUCCESS);
    CHECK(aclmdlCreateDataset() == NULL);
    CHECK_EQ(aclmockFailNext("aclmdlAddDatasetBuffer", 1, 500001), ACL_SUCCESS);
    CHECK_EQ(aclmdlAddDatasetBuffer(out, b), 500001);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroySubscribeConfig(cfg), ACL_SUCCESS);
    close(g_pipe[0][0]);
    aclmockReset();
    CHECK_EQ(stats().datasetsInUse, 2);
    CHECK_EQ(aclmdlDestroyDataset(out), ACL_SUCCESS);
    CHECK_EQ(aclmdlDestroyDataset(empty), ACL_SUCCESS);
    CHECK_EQ(stats().datasetsInUse, 0);
}

int main(void)
{
    tmp_init();
    RUN(load_errors);
    RUN(load_accepts_and_ids);
    RUN(execute_needs_datasets);
    int rc = test_summary();
    tmp_cleanup();
    return rc;
}
