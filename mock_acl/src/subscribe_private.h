/* subscribe.c: the two halves of an unsubscription. (aclmdlUnload used them until it
 * stopped unsubscribing, as CANN's does not: see model.c.)
 *
 * Kept out of mock_internal.h because only subscribe.c uses it. Unsubscribing is split
 * in two so that the slow half (waiting for the writer to drain the model's queued records
 * into a pipe that a reader may be slow to empty) runs WITHOUT g_mock_lock: a reader
 * thread may itself call a function that takes the global lock.
 */
#ifndef ACLMOCK_SUBSCRIBE_PRIVATE_H
#define ACLMOCK_SUBSCRIBE_PRIVATE_H

#include <stdint.h>

typedef struct sub_entry sub_entry;

/* Caller holds g_mock_lock. Stops new records for `model_id` (its subscription leaves the
 * live set at once, so a concurrent re-subscribe is possible) and returns the entry to
 * pass to mock_subscribe_finish_detach, or NULL if the model is not subscribed. */
sub_entry *mock_subscribe_detach(uint32_t model_id);

/* Caller does NOT hold g_mock_lock. Waits until the writer has written (or dropped) every
 * record queued for the entry, closes the pipe fd as aclprofModelUnSubscribe does (unless
 * another subscription still uses that fd) and writes -1 into the caller's int, frees the
 * entry; sets the mode to OFF and stops the writer thread if nothing is subscribed any
 * more. */
void mock_subscribe_finish_detach(sub_entry *entry);

#endif
