/* graphmem.wire: a serialized ONNX ModelProto read straight from the protobuf wire format.
 *
 * parse_model(data) walks the bytes of a ModelProto (any object with the buffer protocol:
 * bytes, memoryview, mmap; it is not copied) and returns named records (struct sequences,
 * tuples whose items also have names: Model, Graph, Node, ...): the opsets, and
 * for the main graph (and, recursively, for the subgraphs of GRAPH and GRAPHS attributes)
 * its nodes, initializers (without their data), value infos with their tensor types, and the
 * byte span of every top-level entry of the GraphProto, so that a caller can re-assemble a
 * modified graph by slicing. The field numbers are those of onnx/onnx.proto.
 *
 * It parses as protobuf does (the specification is onnx.ModelProto.ParseFromString;
 * tests/test_wire.py runs both on mutated files). Every message of onnx-ml.proto is known
 * from a table written from onnx's own descriptors (tools/upstream/wire_schema.py), so a file is
 * refused exactly when protobuf refuses it: the fields this reader does not keep are still
 * walked (sub-messages to any depth, packed runs, groups of unknown fields); a known field
 * that comes with another wire type is an unknown field; a tag takes at most 5 bytes; a
 * length must stay below 2^31 - 1; a group must end where it started; messages nest at
 * most 100 deep below the ModelProto (protobuf's default recursion limit). A later
 * occurrence of a non-repeated scalar or string field replaces the earlier one, the last
 * member of a oneof wins, repeated scalars may be packed or not, and an enum field keeps
 * the low 32 bits of its varint and is ignored when they are not one of its values (proto2
 * closed enums: AttributeProto.type, TensorProto.data_location). A non-repeated message
 * field written twice is merged as protobuf merges it (ValueInfoProto.type,
 * TypeProto.tensor_type, TypeProto.Tensor.shape: the pieces are read in turn into one
 * value), but for ModelProto.graph and AttributeProto.g: a graph in two pieces is refused
 * (ValueError), since the loader edits a graph by its entries' byte spans.
 *
 * Strings are decoded as UTF-8, or returned as bytes where they are not valid UTF-8 (as
 * the protobuf API does for proto2 strings). Within one call equal strings are one object:
 * they are interned in a hash table keyed by their bytes.
 *
 * Malformed data raises ValueError naming the message and the field.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* protobuf's default recursion limit: 100 messages (or groups) below the top one */
#define MAX_DEPTH 100

/* the schema: per message, its fields sorted by number */
enum { K_VARINT = 1, K_FIXED64, K_FIXED32, K_LEN, K_MESSAGE };
typedef struct {
    uint32_t num;
    uint8_t kind;
    uint8_t repeated;
    int16_t sub;   /* K_MESSAGE: the message's index in SCHEMA */
    int16_t enum_; /* an enum field: its index for enum_known, else -1 */
} sfield_t;
typedef struct {
    const sfield_t *fields;
    const int8_t *index; /* field number -> its entry in fields, or -1 */
    uint32_t max_num;
    const char *name;
} smsg_t;

/* BEGIN schema (tools/upstream/wire_schema.py writes this block; do not edit) */
/* every message of onnx/onnx-ml.proto */
enum {
    M_AttributeProto,
    M_DeviceConfigurationProto,
    M_FunctionProto,
    M_GraphProto,
    M_IntIntListEntryProto,
    M_ModelProto,
    M_NodeDeviceConfigurationProto,
    M_NodeProto,
    M_OperatorSetIdProto,
    M_ShardedDimProto,
    M_ShardingSpecProto,
    M_SimpleShardedDimProto,
    M_SparseTensorProto,
    M_StringStringEntryProto,
    M_TensorAnnotation,
    M_TensorProto,
    M_TensorProto_Segment,
    M_TensorShapeProto,
    M_TensorShapeProto_Dimension,
    M_TrainingInfoProto,
    M_TypeProto,
    M_TypeProto_Map,
    M_TypeProto_Opaque,
    M_TypeProto_Optional,
    M_TypeProto_Sequence,
    M_TypeProto_SparseTensor,
    M_TypeProto_Tensor,
    M_ValueInfoProto,
    M_COUNT
};
static const sfield_t F_AttributeProto[] = {
    {1, K_LEN, 0, -1, -1}, /* name */
    {2, K_FIXED32, 0, -1, -1}, /* f */
    {3, K_VARINT, 0, -1, -1}, /* i */
    {4, K_LEN, 0, -1, -1}, /* s */
    {5, K_MESSAGE, 0, M_TensorProto, -1}, /* t */
    {6, K_MESSAGE, 0, M_GraphProto, -1}, /* g */
    {7, K_FIXED32, 1, -1, -1}, /* floats */
    {8, K_VARINT, 1, -1, -1}, /* ints */
    {9, K_LEN, 1, -1, -1}, /* strings */
    {10, K_MESSAGE, 1, M_TensorProto, -1}, /* tensors */
    {11, K_MESSAGE, 1, M_GraphProto, -1}, /* graphs */
    {13, K_LEN, 0, -1, -1}, /* doc_string */
    {14, K_MESSAGE, 0, M_TypeProto, -1}, /* tp */
    {15, K_MESSAGE, 1, M_TypeProto, -1}, /* type_protos */
    {20, K_VARINT, 0, -1, 0}, /* type */
    {21, K_LEN, 0, -1, -1}, /* ref_attr_name */
    {22, K_MESSAGE, 0, M_SparseTensorProto, -1}, /* sparse_tensor */
    {23, K_MESSAGE, 1, M_SparseTensorProto, -1}, /* sparse_tensors */
};
static const int8_t I_AttributeProto[] = {-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -1, 11, 12, 13, -1, -1, -1, -1, 14, 15, 16, 17};
static const sfield_t F_DeviceConfigurationProto[] = {
    {1, K_LEN, 0, -1, -1}, /* name */
    {2, K_VARINT, 0, -1, -1}, /* num_devices */
    {3, K_LEN, 1, -1, -1}, /* device */
};
static const int8_t I_DeviceConfigurationProto[] = {-1, 0, 1, 2};
static const sfield_t F_FunctionProto[] = {
    {1, K_LEN, 0, -1, -1}, /* name */
    {4, K_LEN, 1, -1, -1}, /* input */
    {5, K_LEN, 1, -1, -1}, /* output */
    {6, K_LEN, 1, -1, -1}, /* attribute */
    {7, K_MESSAGE, 1, M_NodeProto, -1}, /* node */
    {8, K_LEN, 0, -1, -1}, /* doc_string */
    {9, K_MESSAGE, 1, M_OperatorSetIdProto, -1}, /* opset_import */
    {10, K_LEN, 0, -1, -1}, /* domain */
    {11, K_MESSAGE, 1, M_AttributeProto, -1}, /* attribute_proto */
    {12, K_MESSAGE, 1, M_ValueInfoProto, -1}, /* value_info */
    {13, K_LEN, 0, -1, -1}, /* overload */
    {14, K_MESSAGE, 1, M_StringStringEntryProto, -1}, /* metadata_props */
};
static const int8_t I_FunctionProto[] = {-1, 0, -1, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
static const sfield_t F_GraphProto[] = {
    {1, K_MESSAGE, 1, M_NodeProto, -1}, /* node */
    {2, K_LEN, 0, -1, -1}, /* name */
    {5, K_MESSAGE, 1, M_TensorProto, -1}, /* initializer */
    {10, K_LEN, 0, -1, -1}, /* doc_string */
    {11, K_MESSAGE, 1, M_ValueInfoProto, -1}, /* input */
    {12, K_MESSAGE, 1, M_ValueInfoProto, -1}, /* output */
    {13, K_MESSAGE, 1, M_ValueInfoProto, -1}, /* value_info */
    {14, K_MESSAGE, 1, M_TensorAnnotation, -1}, /* quantization_annotation */
    {15, K_MESSAGE, 1, M_SparseTensorProto, -1}, /* sparse_initializer */
    {16, K_MESSAGE, 1, M_StringStringEntryProto, -1}, /* metadata_props */
};
static const int8_t I_GraphProto[] = {-1, 0, 1, -1, -1, 2, -1, -1, -1, -1, 3, 4, 5, 6, 7, 8, 9};
static const sfield_t F_IntIntListEntryProto[] = {
    {1, K_VARINT, 0, -1, -1}, /* key */
    {2, K_VARINT, 1, -1, -1}, /* value */
};
static const int8_t I_IntIntListEntryProto[] = {-1, 0, 1};
static const sfield_t F_ModelProto[] = {
    {1, K_VARINT, 0, -1, -1}, /* ir_version */
    {2, K_LEN, 0, -1, -1}, /* producer_name */
    {3, K_LEN, 0, -1, -1}, /* producer_version */
    {4, K_LEN, 0, -1, -1}, /* domain */
    {5, K_VARINT, 0, -1, -1}, /* model_version */
    {6, K_LEN, 0, -1, -1}, /* doc_string */
    {7, K_MESSAGE, 0, M_GraphProto, -1}, /* graph */
    {8, K_MESSAGE, 1, M_OperatorSetIdProto, -1}, /* opset_import */
    {14, K_MESSAGE, 1, M_StringStringEntryProto, -1}, /* metadata_props */
    {20, K_MESSAGE, 1, M_TrainingInfoProto, -1}, /* training_info */
    {25, K_MESSAGE, 1, M_FunctionProto, -1}, /* functions */
    {26, K_MESSAGE, 1, M_DeviceConfigurationProto, -1}, /* configuration */
};
static const int8_t I_ModelProto[] = {-1, 0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1, -1, -1, 8, -1, -1, -1, -1, -1, 9, -1, -1, -1, -1, 10, 11};
static const sfield_t F_NodeDeviceConfigurationProto[] = {
    {1, K_LEN, 0, -1, -1}, /* configuration_id */
    {2, K_MESSAGE, 1, M_ShardingSpecProto, -1}, /* sharding_spec */
    {3, K_VARINT, 0, -1, -1}, /* pipeline_stage */
};
static const int8_t I_NodeDeviceConfigurationProto[] = {-1, 0, 1, 2};
static const sfield_t F_NodeProto[] = {
    {1, K_LEN, 1, -1, -1}, /* input */
    {2, K_LEN, 1, -1, -1}, /* output */
    {3, K_LEN, 0, -1, -1}, /* name */
    {4, K_LEN, 0, -1, -1}, /* op_type */
    {5, K_MESSAGE, 1, M_AttributeProto, -1}, /* attribute */
    {6, K_LEN, 0, -1, -1}, /* doc_string */
    {7, K_LEN, 0, -1, -1}, /* domain */
    {8, K_LEN, 0, -1, -1}, /* overload */
    {9, K_MESSAGE, 1, M_StringStringEntryProto, -1}, /* metadata_props */
    {10, K_MESSAGE, 1, M_NodeDeviceConfigurationProto, -1}, /* device_configurations */
};
static const int8_t I_NodeProto[] = {-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
static const sfield_t F_OperatorSetIdProto[] = {
    {1, K_LEN, 0, -1, -1}, /* domain */
    {2, K_VARINT, 0, -1, -1}, /* version */
};
static const int8_t I_OperatorSetIdProto[] = {-1, 0, 1};
static const sfield_t F_ShardedDimProto[] = {
    {1, K_VARINT, 0, -1, -1}, /* axis */
    {2, K_MESSAGE, 1, M_SimpleShardedDimProto, -1}, /* simple_sharding */
};
static const int8_t I_ShardedDimProto[] = {-1, 0, 1};
static const sfield_t F_ShardingSpecProto[] = {
    {1, K_LEN, 0, -1, -1}, /* tensor_name */
    {2, K_VARINT, 1, -1, -1}, /* device */
    {3, K_MESSAGE, 1, M_IntIntListEntryProto, -1}, /* index_to_device_group_map */
    {4, K_MESSAGE, 1, M_ShardedDimProto, -1}, /* sharded_dim */
};
static const int8_t I_ShardingSpecProto[] = {-1, 0, 1, 2, 3};
static const sfield_t F_SimpleShardedDimProto[] = {
    {1, K_VARINT, 0, -1, -1}, /* dim_value */
    {2, K_LEN, 0, -1, -1}, /* dim_param */
    {3, K_VARINT, 0, -1, -1}, /* num_shards */
};
static const int8_t I_SimpleShardedDimProto[] = {-1, 0, 1, 2};
static const sfield_t F_SparseTensorProto[] = {
    {1, K_MESSAGE, 0, M_TensorProto, -1}, /* values */
    {2, K_MESSAGE, 0, M_TensorProto, -1}, /* indices */
    {3, K_VARINT, 1, -1, -1}, /* dims */
};
static const int8_t I_SparseTensorProto[] = {-1, 0, 1, 2};
static const sfield_t F_StringStringEntryProto[] = {
    {1, K_LEN, 0, -1, -1}, /* key */
    {2, K_LEN, 0, -1, -1}, /* value */
};
static const int8_t I_StringStringEntryProto[] = {-1, 0, 1};
static const sfield_t F_TensorAnnotation[] = {
    {1, K_LEN, 0, -1, -1}, /* tensor_name */
    {2, K_MESSAGE, 1, M_StringStringEntryProto, -1}, /* quant_parameter_tensor_names */
};
static const int8_t I_TensorAnnotation[] = {-1, 0, 1};
static const sfield_t F_TensorProto[] = {
    {1, K_VARINT, 1, -1, -1}, /* dims */
    {2, K_VARINT, 0, -1, -1}, /* data_type */
    {3, K_MESSAGE, 0, M_TensorProto_Segment, -1}, /* segment */
    {4, K_FIXED32, 1, -1, -1}, /* float_data */
    {5, K_VARINT, 1, -1, -1}, /* int32_data */
    {6, K_LEN, 1, -1, -1}, /* string_data */
    {7, K_VARINT, 1, -1, -1}, /* int64_data */
    {8, K_LEN, 0, -1, -1}, /* name */
    {9, K_LEN, 0, -1, -1}, /* raw_data */
    {10, K_FIXED64, 1, -1, -1}, /* double_data */
    {11, K_VARINT, 1, -1, -1}, /* uint64_data */
    {12, K_LEN, 0, -1, -1}, /* doc_string */
    {13, K_MESSAGE, 1, M_StringStringEntryProto, -1}, /* external_data */
    {14, K_VARINT, 0, -1, 1}, /* data_location */
    {16, K_MESSAGE, 1, M_StringStringEntryProto, -1}, /* metadata_props */
};
static const int8_t I_TensorProto[] = {-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, -1, 14};
static const sfield_t F_TensorProto_Segment[] = {
    {1, K_VARINT, 0, -1, -1}, /* begin */
    {2, K_VARINT, 0, -1, -1}, /* end */
};
static const int8_t I_TensorProto_Segment[] = {-1, 0, 1};
static const sfield_t F_TensorShapeProto[] = {
    {1, K_MESSAGE, 1, M_TensorShapeProto_Dimension, -1}, /* dim */
};
static const int8_t I_TensorShapeProto[] = {-1, 0};
static const sfield_t F_TensorShapeProto_Dimension[] = {
    {1, K_VARINT, 0, -1, -1}, /* dim_value */
    {2, K_LEN, 0, -1, -1}, /* dim_param */
    {3, K_LEN, 0, -1, -1}, /* denotation */
};
static const int8_t I_TensorShapeProto_Dimension[] = {-1, 0, 1, 2};
static const sfield_t F_TrainingInfoProto[] = {
    {1, K_MESSAGE, 0, M_GraphProto, -1}, /* initialization */
    {2, K_MESSAGE, 0, M_GraphProto, -1}, /* algorithm */
    {3, K_MESSAGE, 1, M_StringStringEntryProto, -1}, /* initialization_binding */
    {4, K_MESSAGE, 1, M_StringStringEntryProto, -1}, /* update_binding */
};
static const int8_t I_TrainingInfoProto[] = {-1, 0, 1, 2, 3};
static const sfield_t F_TypeProto[] = {
    {1, K_MESSAGE, 0, M_TypeProto_Tensor, -1}, /* tensor_type */
    {4, K_MESSAGE, 0, M_TypeProto_Sequence, -1}, /* sequence_type */
    {5, K_MESSAGE, 0, M_TypeProto_Map, -1}, /* map_type */
    {6, K_LEN, 0, -1, -1}, /* denotation */
    {7, K_MESSAGE, 0, M_TypeProto_Opaque, -1}, /* opaque_type */
    {8, K_MESSAGE, 0, M_TypeProto_SparseTensor, -1}, /* sparse_tensor_type */
    {9, K_MESSAGE, 0, M_TypeProto_Optional, -1}, /* optional_type */
};
static const int8_t I_TypeProto[] = {-1, 0, -1, -1, 1, 2, 3, 4, 5, 6};
static const sfield_t F_TypeProto_Map[] = {
    {1, K_VARINT, 0, -1, -1}, /* key_type */
    {2, K_MESSAGE, 0, M_TypeProto, -1}, /* value_type */
};
static const int8_t I_TypeProto_Map[] = {-1, 0, 1};
static const sfield_t F_TypeProto_Opaque[] = {
    {1, K_LEN, 0, -1, -1}, /* domain */
    {2, K_LEN, 0, -1, -1}, /* name */
};
static const int8_t I_TypeProto_Opaque[] = {-1, 0, 1};
static const sfield_t F_TypeProto_Optional[] = {
    {1, K_MESSAGE, 0, M_TypeProto, -1}, /* elem_type */
};
static const int8_t I_TypeProto_Optional[] = {-1, 0};
static const sfield_t F_TypeProto_Sequence[] = {
    {1, K_MESSAGE, 0, M_TypeProto, -1}, /* elem_type */
};
static const int8_t I_TypeProto_Sequence[] = {-1, 0};
static const sfield_t F_TypeProto_SparseTensor[] = {
    {1, K_VARINT, 0, -1, -1}, /* elem_type */
    {2, K_MESSAGE, 0, M_TensorShapeProto, -1}, /* shape */
};
static const int8_t I_TypeProto_SparseTensor[] = {-1, 0, 1};
static const sfield_t F_TypeProto_Tensor[] = {
    {1, K_VARINT, 0, -1, -1}, /* elem_type */
    {2, K_MESSAGE, 0, M_TensorShapeProto, -1}, /* shape */
};
static const int8_t I_TypeProto_Tensor[] = {-1, 0, 1};
static const sfield_t F_ValueInfoProto[] = {
    {1, K_LEN, 0, -1, -1}, /* name */
    {2, K_MESSAGE, 0, M_TypeProto, -1}, /* type */
    {3, K_LEN, 0, -1, -1}, /* doc_string */
    {4, K_MESSAGE, 1, M_StringStringEntryProto, -1}, /* metadata_props */
};
static const int8_t I_ValueInfoProto[] = {-1, 0, 1, 2, 3};
static const smsg_t SCHEMA[M_COUNT] = {
    [M_AttributeProto] = {F_AttributeProto, I_AttributeProto, 23, "AttributeProto"},
    [M_DeviceConfigurationProto] = {F_DeviceConfigurationProto, I_DeviceConfigurationProto, 3, "DeviceConfigurationProto"},
    [M_FunctionProto] = {F_FunctionProto, I_FunctionProto, 14, "FunctionProto"},
    [M_GraphProto] = {F_GraphProto, I_GraphProto, 16, "GraphProto"},
    [M_IntIntListEntryProto] = {F_IntIntListEntryProto, I_IntIntListEntryProto, 2, "IntIntListEntryProto"},
    [M_ModelProto] = {F_ModelProto, I_ModelProto, 26, "ModelProto"},
    [M_NodeDeviceConfigurationProto] = {F_NodeDeviceConfigurationProto, I_NodeDeviceConfigurationProto, 3, "NodeDeviceConfigurationProto"},
    [M_NodeProto] = {F_NodeProto, I_NodeProto, 10, "NodeProto"},
    [M_OperatorSetIdProto] = {F_OperatorSetIdProto, I_OperatorSetIdProto, 2, "OperatorSetIdProto"},
    [M_ShardedDimProto] = {F_ShardedDimProto, I_ShardedDimProto, 2, "ShardedDimProto"},
    [M_ShardingSpecProto] = {F_ShardingSpecProto, I_ShardingSpecProto, 4, "ShardingSpecProto"},
    [M_SimpleShardedDimProto] = {F_SimpleShardedDimProto, I_SimpleShardedDimProto, 3, "SimpleShardedDimProto"},
    [M_SparseTensorProto] = {F_SparseTensorProto, I_SparseTensorProto, 3, "SparseTensorProto"},
    [M_StringStringEntryProto] = {F_StringStringEntryProto, I_StringStringEntryProto, 2, "StringStringEntryProto"},
    [M_TensorAnnotation] = {F_TensorAnnotation, I_TensorAnnotation, 2, "TensorAnnotation"},
    [M_TensorProto] = {F_TensorProto, I_TensorProto, 16, "TensorProto"},
    [M_TensorProto_Segment] = {F_TensorProto_Segment, I_TensorProto_Segment, 2, "TensorProto.Segment"},
    [M_TensorShapeProto] = {F_TensorShapeProto, I_TensorShapeProto, 1, "TensorShapeProto"},
    [M_TensorShapeProto_Dimension] = {F_TensorShapeProto_Dimension, I_TensorShapeProto_Dimension, 3, "TensorShapeProto.Dimension"},
    [M_TrainingInfoProto] = {F_TrainingInfoProto, I_TrainingInfoProto, 4, "TrainingInfoProto"},
    [M_TypeProto] = {F_TypeProto, I_TypeProto, 9, "TypeProto"},
    [M_TypeProto_Map] = {F_TypeProto_Map, I_TypeProto_Map, 2, "TypeProto.Map"},
    [M_TypeProto_Opaque] = {F_TypeProto_Opaque, I_TypeProto_Opaque, 2, "TypeProto.Opaque"},
    [M_TypeProto_Optional] = {F_TypeProto_Optional, I_TypeProto_Optional, 1, "TypeProto.Optional"},
    [M_TypeProto_Sequence] = {F_TypeProto_Sequence, I_TypeProto_Sequence, 1, "TypeProto.Sequence"},
    [M_TypeProto_SparseTensor] = {F_TypeProto_SparseTensor, I_TypeProto_SparseTensor, 2, "TypeProto.SparseTensor"},
    [M_TypeProto_Tensor] = {F_TypeProto_Tensor, I_TypeProto_Tensor, 2, "TypeProto.Tensor"},
    [M_ValueInfoProto] = {F_ValueInfoProto, I_ValueInfoProto, 4, "ValueInfoProto"},
};
/* whether v is a value of the (closed, proto2) enum numbered e above */
static int enum_known(int e, int32_t v)
{
    switch (e) {
    case 0: /* onnx.AttributeProto.AttributeType */
        switch (v) {
        case 0:
        case 1:
        case 2:
        case 3:
        case 4:
        case 5:
        case 6:
        case 7:
        case 8:
        case 9:
        case 10:
        case 11:
        case 12:
        case 13:
        case 14:
            return 1;
        }
        return 0;
    case 1: /* onnx.TensorProto.DataLocation */
        switch (v) {
        case 0:
        case 1:
            return 1;
        }
        return 0;
    }
    return 0;
}
/* END schema */

/* Take a new tuple of atoms (str, int, bytes, None, such tuples) out of the cyclic garbage
 * collector, as CPython does for such tuples when it first meets them: a parse makes
 * hundreds of thousands, which the collector would otherwise traverse again and again. */
static PyObject *untrack(PyObject *t)
{
    if (t == NULL || !PyObject_GC_IsTracked(t))
        return t;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
        PyObject *o = PyTuple_GET_ITEM(t, i);
        if (PyObject_IS_GC(o) && PyObject_GC_IsTracked(o))
            return t;
    }
    PyObject_GC_UnTrack(t);
    return t;
}

/* ---- growable stacks of owned references (repeated fields being collected) ---- */

typedef struct {
    PyObject **v;
    Py_ssize_t n, cap;
} stk_t;

/* steals o (also on failure) */
static int stk_push(stk_t *s, PyObject *o)
{
    if (o == NULL)
        return -1;
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 64;
        PyObject **v = PyMem_Realloc(s->v, sizeof(PyObject *) * (size_t)cap);
        if (v == NULL) {
            Py_DECREF(o);
            PyErr_NoMemory();
            return -1;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = o;
    return 0;
}

static void stk_pop(stk_t *s, Py_ssize_t base)
{
    while (s->n > base) {
        s->n--;
        Py_DECREF(s->v[s->n]);
    }
}

/* a new tuple of the items above base, which it takes over */
static PyObject *stk_tuple(stk_t *s, Py_ssize_t base)
{
    PyObject *t = PyTuple_New(s->n - base);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = base; i < s->n; i++)
        PyTuple_SET_ITEM(t, i - base, s->v[i]);
    s->n = base;
    return untrack(t);
}

static void stk_free(stk_t *s)
{
    stk_pop(s, 0);
    PyMem_Free(s->v);
    s->v = NULL;
    s->cap = 0;
}

/* ---- the parse context: the data, the string table, the stacks ---- */

typedef struct {
    const uint8_t *s;
    Py_ssize_t n;
    uint64_t h;
    PyObject *o; /* owned; NULL: empty slot */
} ent_t;

typedef struct {
    const uint8_t *data;
    ent_t *tab;
    size_t cap, used;
    int depth;
    size_t not_utf8; /* how many distinct strings came back as bytes */
    int skip_nodes;  /* parse_values: the nodes of the main graph are left out */
    stk_t ins, outs, attrs, dims, ext, shape;
} ctx_t;

static PyObject *s_tensor, *t_sequence, *t_map, *t_optional, *t_sparse, *t_opaque;

static uint64_t hash_bytes(const uint8_t *s, Py_ssize_t n)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ULL;
    h ^= h >> 32;
    return h * 0x9E3779B97F4A7C15ULL;
}

static int tab_grow(ctx_t *c)
{
    size_t cap = c->cap ? c->cap * 2 : 1024;
    ent_t *tab = PyMem_Calloc(cap, sizeof(ent_t));
    if (tab == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < c->cap; i++) {
        if (c->tab[i].o == NULL)
            continue;
        size_t j = (size_t)c->tab[i].h & (cap - 1);
        while (tab[j].o != NULL)
            j = (j + 1) & (cap - 1);
        tab[j] = c->tab[i];
    }
    PyMem_Free(c->tab);
    c->tab = tab;
    c->cap = cap;
    return 0;
}

/* a new reference to the (interned) string of these bytes: str, or bytes if not UTF-8 */
static PyObject *mkstr(ctx_t *c, const uint8_t *s, Py_ssize_t n)
{
    if (n == 0)
        return PyUnicode_New(0, 0); /* the empty string, a singleton */
    if ((c->used + 1) * 2 > c->cap && tab_grow(c) < 0)
        return NULL;
    uint64_t h = hash_bytes(s, n);
    size_t j = (size_t)h & (c->cap - 1);
    while (c->tab[j].o != NULL) {
        ent_t *e = &c->tab[j];
        if (e->h == h && e->n == n && memcmp(e->s, s, (size_t)n) == 0)
            return Py_NewRef(e->o);
        j = (j + 1) & (c->cap - 1);
    }
    PyObject *o = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
    if (o == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return NULL;
        PyErr_Clear();
        o = PyBytes_FromStringAndSize((const char *)s, n);
        if (o == NULL)
            return NULL;
        c->not_utf8++;
    }
    c->tab[j].s = s;
    c->tab[j].n = n;
    c->tab[j].h = h;
    c->tab[j].o = o;
    c->used++;
    return Py_NewRef(o);
}

static void ctx_free(ctx_t *c)
{
    for (size_t i = 0; i < c->cap; i++)
        Py_XDECREF(c->tab[i].o);
    PyMem_Free(c->tab);
    c->tab = NULL;
    stk_free(&c->ins);
    stk_free(&c->outs);
    stk_free(&c->attrs);
    stk_free(&c->dims);
    stk_free(&c->ext);
    stk_free(&c->shape);
}

/* ---- the wire format ---- */

typedef struct {
    const uint8_t *p, *end;
    const char *msg;
    int m; /* the message's index in SCHEMA */
} cur_t;

static cur_t cursor(int m, const uint8_t *p, const uint8_t *end)
{
    cur_t r = {p, end, SCHEMA[m].name, m};
    return r;
}

static int fail_at(const cur_t *r, const char *field, uint32_t num, const char *what)
{
    if (field)
        PyErr_Format(PyExc_ValueError, "%s.%s: %s", r->msg, field, what);
    else
        PyErr_Format(PyExc_ValueError, "%s field %u: %s", r->msg, (unsigned)num, what);
    return -1;
}

/* 0, or -1 truncated, -2 longer than 10 bytes; *len: the bytes it took */
static inline int rd_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift; /* the 10th byte: only its lowest bit counts */
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return -2;
}

static int varint_at(cur_t *r, const char *field, uint32_t num, uint64_t *v)
{
    if (r->p < r->end && *r->p < 0x80) {
        *v = *r->p++;
        return 0;
    }
    int e = rd_varint(&r->p, r->end, v);
    if (e == -1)
        return fail_at(r, field, num, "truncated varint");
    if (e == -2)
        return fail_at(r, field, num, "varint longer than 10 bytes");
    return 0;
}

/* a tag as protobuf reads it: at most 5 bytes, at most 2^32 - 1, field number not 0, wire
 * type 0-5; 1: read, -1: error */
static int read_tag(cur_t *r, uint32_t *field, int *wt)
{
    const uint8_t *start = r->p;
    uint64_t t;
    if (varint_at(r, "tag", 0, &t) < 0)
        return -1;
    if (r->p - start > 5 || t > 0xFFFFFFFFu || (t >> 3) == 0 || (t & 7) > 5) {
        PyErr_Format(PyExc_ValueError, "%s: invalid tag %llu", r->msg, (unsigned long long)t);
        return -1;
    }
    *field = (uint32_t)(t >> 3);
    *wt = (int)(t & 7);
    return 1;
}

/* the next field of a message: 1 a tag was read, 0 the end of the message, -1 error (an
 * end-group tag here ends no group: protobuf refuses it too) */
static int next_tag(cur_t *r, uint32_t *field, int *wt)
{
    if (r->p >= r->end)
        return 0;
    if (read_tag(r, field, wt) < 0)
        return -1;
    if (*wt == 4) {
        PyErr_Format(PyExc_ValueError, "%s field %u: end of a group that was not started",
                     r->msg, (unsigned)*field);
        return -1;
    }
    return 1;
}

static int wrong_wt(cur_t *r, const char *field, uint32_t num, int wt)
{
    char what[48];
    PyOS_snprintf(what, sizeof(what), "wrong wire type %d", wt);
    return fail_at(r, field, num, what);
}

/* a length-delimited field: its content [*s, *s + *n) */
static int get_len(cur_t *r, const char *field, uint32_t num, int wt, const uint8_t **s,
                   Py_ssize_t *n)
{
    uint64_t len;
    if (wt != 2)
        return wrong_wt(r, field, num, wt);
    if (varint_at(r, field, num, &len) < 0)
        return -1;
    if (len >= 0x7FFFFFFF) /* protobuf's limit for one length */
        return fail_at(r, field, num, "length of 2^31 - 1 or more");
    if (len > (uint64_t)(r->end - r->p))
        return fail_at(r, field, num, "length past the end of the data");
    *s = r->p;
    *n = (Py_ssize_t)len;
    r->p += len;
    return 0;
}

static int get_varint(cur_t *r, const char *field, uint32_t num, int wt, uint64_t *v)
{
    if (wt != 0)
        return wrong_wt(r, field, num, wt);
    return varint_at(r, field, num, v);
}

static int enter(ctx_t *c, const char *msg)
{
    /* the ModelProto is depth 1: MAX_DEPTH more below it */
    if (++c->depth > MAX_DEPTH + 1) {
        c->depth--;
        PyErr_Format(PyExc_ValueError, "%s: nesting deeper than %d", msg, MAX_DEPTH);
        return -1;
    }
    return 0;
}

/* field number num of message m in the schema, or NULL */
static const sfield_t *lookup(int m, uint32_t num)
{
    if (num > SCHEMA[m].max_num || SCHEMA[m].index[num] < 0)
        return NULL;
    return &SCHEMA[m].fields[SCHEMA[m].index[num]];
}

/* the schema's field when protobuf reads (num, wt) as that known field of message m; NULL
 * when it keeps it as an unknown field (not in the schema, or another wire type) */
static const sfield_t *known(int m, uint32_t num, int wt)
{
    const sfield_t *f = lookup(m, num);
    if (f == NULL)
        return NULL;
    switch (f->kind) {
    case K_VARINT:
        return wt == 0 || (f->repeated && wt == 2) ? f : NULL;
    case K_FIXED64:
        return wt == 1 || (f->repeated && wt == 2) ? f : NULL;
    case K_FIXED32:
        return wt == 5 || (f->repeated && wt == 2) ? f : NULL;
    default: /* K_LEN, K_MESSAGE */
        return wt == 2 ? f : NULL;
    }
}

static int check_message(ctx_t *c, int m, const uint8_t *p, const uint8_t *end);

/* the value of an unknown field (a group: up to its end, checked as protobuf does) */
static int skip_unknown(ctx_t *c, cur_t *r, uint32_t num, int wt)
{
    uint64_t v;
    const uint8_t *s;
    Py_ssize_t n;
    switch (wt) {
    case 0:
        return varint_at(r, NULL, num, &v);
    case 1:
    case 5: {
        Py_ssize_t k = wt == 1 ? 8 : 4;
        if (r->end - r->p < k)
            return fail_at(r, NULL, num, "fixed-size value past the end of the data");
        r->p += k;
        return 0;
    }
    case 2:
        return get_len(r, NULL, num, wt, &s, &n);
    case 3: {
        if (enter(c, r->msg) < 0)
            return -1;
        for (;;) {
            uint32_t f;
            int w;
            if (r->p >= r->end) {
                c->depth--;
                return fail_at(r, NULL, num, "group without its end");
            }
            if (read_tag(r, &f, &w) < 0)
                goto fail;
            if (w == 4) {
                if (f != num) {
                    fail_at(r, NULL, num, "group ended by another field's end-group tag");
                    goto fail;
                }
                c->depth--;
                return 0;
            }
            if (skip_unknown(c, r, f, w) < 0)
                goto fail;
        }
    fail:
        c->depth--;
        return -1;
    }
    default:
        return wrong_wt(r, NULL, num, wt);
    }
}

/* a field this reader does not keep, checked as protobuf parses it: a sub-message walked
 * (to any depth), a packed run read through, anything else skipped */
static int skip_field(ctx_t *c, cur_t *r, uint32_t num, int wt)
{
    const sfield_t *f = known(r->m, num, wt);
    if (f == NULL || wt != 2)
        return skip_unknown(c, r, num, wt);
    const uint8_t *s;
    Py_ssize_t n;
    if (get_len(r, NULL, num, wt, &s, &n) < 0)
        return -1;
    switch (f->kind) {
    case K_MESSAGE:
        return check_message(c, f->sub, s, s + n);
    case K_FIXED32:
    case K_FIXED64:
        if (n % (f->kind == K_FIXED32 ? 4 : 8))
            return fail_at(r, NULL, num, "packed run not a whole number of values");
        return 0;
    case K_VARINT: {
        cur_t packed = {s, s + n, r->msg, r->m};
        uint64_t v;
        while (packed.p < packed.end)
            if (varint_at(&packed, NULL, num, &v) < 0)
                return -1;
        return 0;
    }
    default:
        return 0;
    }
}

/* a message this reader does not keep, checked as protobuf parses it */
static int check_message(ctx_t *c, int m, const uint8_t *p, const uint8_t *end)
{
    cur_t r = cursor(m, p, end);
    uint32_t f;
    int wt, rc;
    if (enter(c, r.msg) < 0)
        return -1;
    while ((rc = next_tag(&r, &f, &wt)) > 0)
        if (skip_field(c, &r, f, wt) < 0) {
            rc = -1;
            break;
        }
    c->depth--;
    return rc;
}

/* an enum field: the low 32 bits of the varint, if they are one of its values (else the
 * field keeps its value, as protobuf keeps an unknown value of a closed enum aside) */
static void set_enum(int m, uint32_t num, uint64_t v, int64_t *field)
{
    const sfield_t *f = lookup(m, num);
    int32_t low = (int32_t)(uint32_t)v;
    if (f != NULL && f->enum_ >= 0 && enum_known(f->enum_, low))
        *field = low;
}

/* the pieces of a non-repeated message field that appears more than once, which protobuf
 * merges: read in turn into one value */
typedef struct {
    const uint8_t *s[4];
    Py_ssize_t n[4];
    const uint8_t **more_s; /* past four */
    Py_ssize_t *more_n;
    Py_ssize_t count, cap;
} pieces_t;

static int pieces_add(pieces_t *ps, const uint8_t *s, Py_ssize_t n)
{
    if (ps->count < 4) {
        ps->s[ps->count] = s;
        ps->n[ps->count++] = n;
        return 0;
    }
    Py_ssize_t k = ps->count - 4;
    if (k == ps->cap) {
        Py_ssize_t cap = ps->cap ? ps->cap * 2 : 8;
        const uint8_t **ms = PyMem_Realloc(ps->more_s, sizeof(*ms) * (size_t)cap);
        if (ms == NULL)
            goto nomem;
        ps->more_s = ms;
        Py_ssize_t *mn = PyMem_Realloc(ps->more_n, sizeof(*mn) * (size_t)cap);
        if (mn == NULL)
            goto nomem;
        ps->more_n = mn;
        ps->cap = cap;
    }
    ps->more_s[k] = s;
    ps->more_n[k] = n;
    ps->count++;
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

static void piece(const pieces_t *ps, Py_ssize_t i, const uint8_t **s, const uint8_t **end)
{
    *s = i < 4 ? ps->s[i] : ps->more_s[i - 4];
    *end = *s + (i < 4 ? ps->n[i] : ps->more_n[i - 4]);
}

static void pieces_free(pieces_t *ps)
{
    PyMem_Free(ps->more_s);
    PyMem_Free(ps->more_n);
    memset(ps, 0, sizeof(*ps));
}

/* a string field seen last at [s, s + n), or absent (s NULL) */
typedef struct {
    const uint8_t *s;
    Py_ssize_t n;
} sref_t;

static PyObject *sref_str(ctx_t *c, sref_t f)
{
    return mkstr(c, f.s ? f.s : (const uint8_t *)"", f.s ? f.n : 0);
}

static PyObject *pair(PyObject *a, PyObject *b) /* steals both */
{
    PyObject *t = NULL;
    if (a && b)
        t = PyTuple_New(2);
    if (t == NULL) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, a);
    PyTuple_SET_ITEM(t, 1, b);
    return untrack(t);
}

/* ---- the named records (struct sequences: tuples whose items also have names) ---- */

static PyTypeObject *r_node, *r_attr, *r_init, *r_value, *r_type, *r_graph, *r_model;

/* a new record of type `type` holding items[0..n), which it steals (also on failure) */
static PyObject *record(PyTypeObject *type, PyObject **items, Py_ssize_t n)
{
    PyObject *r = NULL;
    Py_ssize_t i;
    for (i = 0; i < n && items[i] != NULL; i++)
        ;
    if (i == n)
        r = PyStructSequence_New(type);
    if (r == NULL) {
        for (i = 0; i < n; i++)
            Py_XDECREF(items[i]);
        return NULL;
    }
    for (i = 0; i < n; i++)
        PyStructSequence_SET_ITEM(r, i, items[i]);
    return untrack(r);
}

/* record() for a record that holds lists and dicts (a Graph, a Model): tracked by the
   cycle collector, as the containers it holds are (PyStructSequence_New leaves a record
   untracked) */
static PyObject *container_record(PyTypeObject *type, PyObject **items, Py_ssize_t n)
{
    PyObject *r = record(type, items, n);
    if (r != NULL && !PyObject_GC_IsTracked(r))
        PyObject_GC_Track(r);
    return r;
}

/* ---- the messages ---- */

static PyObject *parse_graph(ctx_t *c, const uint8_t *p, const uint8_t *end);

/* 1: (f, wt) is a field protobuf keeps as unknown in r's message, skipped; 0: a known
 * field, for the caller to read; -1: error */
static int skipped_unknown(ctx_t *c, cur_t *r, uint32_t f, int wt)
{
    if (known(r->m, f, wt) != NULL)
        return 0;
    return skip_unknown(c, r, f, wt) < 0 ? -1 : 1;
}

/* the loop over a message's fields: unknown ones are skipped before the body sees them */
#define EACH_KNOWN_FIELD(c, r, f, wt, rc, fail)                                             \
    while ((rc = next_tag(&(r), &(f), &(wt))) > 0)                                           \
        if ((rc = skipped_unknown(c, &(r), f, wt)) < 0)                                     \
            goto fail;                                                                       \
        else if (rc == 0)

/* StringStringEntryProto -> (key, value) */
static PyObject *parse_entry(ctx_t *c, const uint8_t *p, const uint8_t *end)
{
    cur_t r = cursor(M_StringStringEntryProto, p, end);
    sref_t key = {NULL, 0}, value = {NULL, 0};
    uint32_t f;
    int wt, rc;
    if (enter(c, r.msg) < 0)
        return NULL;
    EACH_KNOWN_FIELD(c, r, f, wt, rc, fail) {
        if (f == 1) {
            if (get_len(&r, "key", f, wt, &key.s, &key.n) < 0)
                goto fail;
        } else if (f == 2) {
            if (get_len(&r, "value", f, wt, &value.s, &value.n) < 0)
                goto fail;
        } else if (skip_field(c, &r, f, wt) < 0)
            goto fail;
    }
    if (rc < 0)
        goto fail;
    c->depth--;
    return pair(sref_str(c, key), sref_str(c, value));
fail:
    c->depth--;
    return NULL;
}

/* OperatorSetIdProto -> (domain, version) */
static PyObject *parse_opset(ctx_t *c, const uint8_t *p, const uint8_t *end)
{
    cur_t r = cursor(M_OperatorSetIdProto, p, end);
    sref_t domain = {NULL, 0};
    uint64_t version = 0;
    uint32_t f;
    int wt, rc;
    if (enter(c, r.msg) < 0)
        return NULL;
    EACH_KNOWN_FIELD(c, r, f, wt, rc, fail) {
        if (f == 1) {
            if (get_len(&r, "domain", f, wt, &domain.s, &domain.n) < 0)
                goto fail;
        } else if (f == 2) {
            if (get_varint(&r, "version", f, wt, &version) < 0)
                goto fail;
        } else if (skip_field(c, &r, f, wt) < 0)
            goto fail;
    }
    if (rc < 0)
        goto fail;
    c->depth--;
    return pair(sref_str(c, domain), PyLong_FromLongLong((long long)(int64_t)version));
fail:
    c->depth--;
    return NULL;
}

/* repeated int64 (dims, ...): one varint, or a packed run; pushes PyLongs onto st */
static int get_ints(cur_t *r, const char *field, uint32_t num, int wt, stk_t *st)
{
    uint64_t v;
    if (wt == 0) {
        if (varint_at(r, field, num, &v) < 0)
            return -1;
        return stk_push(st, PyLong_FromLongLong((long long)(int64_t)v));
    }
    const uint8_t *s;
    Py_ssize_t n;
    if (get_len(r, field, num, wt, &s, &n) < 0)
        return -1;
    cur_t packed = {s, s + n, r->msg, r->m};
    while (packed.p < packed.end) {
        if (varint_at(&packed, field, num, &v) < 0)
            return -1;
        if (stk_push(st, PyLong_FromLongLong((long long)(int64_t)v)) < 0)
            return -1;
    }
    return 0;
}

/* TensorProto -> Initializer(name, data_type, dims, data_location, raw_bytes, external_data) */
static PyObject *parse_tensor(ctx_t *c, const uint8_t *p, const uint8_t *end)
{
    cur_t r = cursor(M_TensorProto, p, end);
    sref_t name = {NULL, 0};
    int32_t data_type = 0;
    int64_t location = 0;
    Py_ssize_t raw_len = 0;
    Py_ssize_t db = c->dims.n, eb = c->ext.n;
    PyObject *dims = NULL, *ext = NULL;
    const uint8_t *s;
    Py_ssize_t n;
    uint64_t v;
    uint32_t f;
    int wt, rc;
    if (enter(c, r.msg) < 0)
        return NULL;
    EACH_KNOWN_FIELD(c, r, f, wt, rc, fail) {
        switch (f) {
        case 1:
            if (get_ints(&r, "dims", f, wt, &c->dims) < 0)
                goto fail;
            break;
        case 2:
            if (get_varint(&r, "data_type", f, wt, &v) < 0)
                goto fail;
            data_type = (int32_t)(uint32_t)v; /* an int32 field: the low 32 bits */
            break;
        case 8:
            if (get_len(&r, "name", f, wt, &name.s, &name.n) < 0)
                goto fail;
            break;
        case 9:
            if (get_len(&r, "raw_data", f, wt, &s, &raw_len) < 0)
                goto fail;
            break;
        case 13:
            if (get_len(&r, "external_data", f, wt, &s, &n) < 0 ||
                stk_push(&c->ext, parse_entry(c, s, s + n)) < 0)
                goto fail;
            break;
        case 14:
            if (get_varint(&r, "data_location", f, wt, &v) < 0)
                goto fail;
            set_enum(r.m, f, v, &location);
            break;
        default:
            if (skip_field(c, &r, f, wt) < 0)
                goto fail;
        }
    }
    if (rc < 0)
        goto fail;
    if ((dims = stk_tuple(&c->dims, db)) == NULL || (ext = stk_tuple(&c->ext, eb)) == NULL)
        goto fail;
    PyObject *items[6] = {sref_str(c, name), PyLong_FromLong(data_type), dims,
                          PyLong_FromLongLong(location), PyLong_FromSsize_t(raw_len), ext};
    c->depth--;
    return record(r_init, items, 6);
fail:
    Py_XDECREF(dims);
    Py_XDECREF(ext);
    stk_pop(&c->dims, db);
    stk_pop(&c->ext, eb);
    c->depth--;
    return NULL;
}

/* TensorShapeProto.Dimension -> int (dim_value), str (dim_param) or None */
static PyObject *parse_dim(ctx_t *c, const uint8_t *p, const uint8_t *end)
{
    cur_t r = cursor(M_TensorShapeProto_Dimension, p, end);
    int which = 0; /* the oneof: 0 neither, 1 dim_value, 2 dim_param */
    uint64_t value = 0;
    sref_t param = {NULL, 0};
    uint32_t f;
    int wt, rc;
    if (enter(c, r.msg) < 0)
        return NULL;
    EACH_KNOWN_FIELD(c, r, f, wt, rc, fail) {
        if (f == 1) {
            if (get_varint(&r, "dim_value", f, wt, &value) < 0)
                goto fail;
            which = 1;
        } else if (f == 2) {
            if (get_len(&r, "dim_param", f, wt, &param.s, &param.n) < 0)
                goto fail;
            which = 2;
        } else if (skip_field(c, &r, f, wt) < 0)
            goto fail;
    }
    if (rc < 0)
        goto fail;
    c->depth--;
    if (which == 1)
        return PyLong_FromLongLong((long long)(int64_t)value);
    if (which == 2)
        return sref_str(c, param);
    Py_RETURN_NONE;
fail:
    c->depth--;
    return NULL;
}

/* TensorShapeProto, in one piece or more (merged: their dims one after another) -> tuple
 * of dims */
static PyObject *parse_shape(ctx_t *c, const pieces_t *ps)
{
    Py_ssize_t base = c->shape.n;
    PyObject *res;
    const uint8_t *s, *p, *end;
    Py_ssize_t n;
    uint32_t f;
    int wt, rc = 0;
    if (enter(c, SCHEMA[M_TensorShapeProto].name) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < ps->count; i++) {
        piece(ps, i, &p, &end);
        cur_t r = cursor(M_TensorShapeProto, p, end);
        EACH_KNOWN_FIELD(c, r, f, wt, rc, fail) {
            if (f == 1) {
                if (get_len(&r, "dim", f, wt, &s, &n) < 0 ||
                    stk_push(&c->shape, parse_dim(c, s, s + n)) < 0)
                    goto fail;
            } else if (skip_field(c, &r, f, wt) < 0)
                goto fail;
        }
        if (rc < 0)
            goto fail;
    }
    if ((res = stk_tuple(&c->shape, base)) == NULL)
        goto fail;
    c->depth--;
    return res;
fail:
    stk_pop(&c->shape, base);
    c->depth--;
    return NULL;
}

/* TypeProto.Tensor, in one piece or more -> ValueType("tensor", elem_type, shape or None) */
static PyObject *parse_tensor_type(ctx_t *c, const pieces_t *ps)
{
    int32_t elem = 0;
    pieces_t shape_pieces;
    PyObject *shape = NULL;
    const uint8_t *s, *p, *end;
    Py_ssize_t n;
    uint64_t v;
    uint32_t f;
    int wt, rc = 0;
    memset(&shape_pieces, 0, sizeof(shape_pieces));
    if (enter(c, SCHEMA[M_TypeProto_Tensor].name) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < ps->count; i++) {
        piece(ps, i, &p, &end);
        cur_t r = cursor(M_TypeProto_Tensor, p, end);
        EACH_KNOWN_FIELD(c, r, f, wt, rc, fail) {
            if (f == 1) {
                if (get_varint(&r, "elem_type", f, wt, &v) < 0)
                    goto fail;
                elem = (int32_t)(uint32_t)v;
            } else if (f == 2) {
                if (get_len(&r, "shape", f, wt, &s, &n) < 0 || pieces_add(&shape_pieces, s, n) < 0)
                    goto fail;
            } else if (skip_field(c, &r, f, wt) < 0)
                goto fail;
        }
        if (rc < 0)
            goto fail;
    }
    if (shape_pieces.count && (shape = parse_shape(c, &shape_pieces)) == NULL)
        goto fail;
    PyObject *items[3] = {Py_NewRef(s_tensor), PyLong_FromLong(elem),
                          shape ? shape : Py_NewRef(Py_None)};
    pieces_free(&shape_pieces);
    c->depth--;
    return record(r_type, items, 3);
fail:
    Py_XDECREF(shape);
    pieces_free(&shape_pieces);
    c->depth--;
    return NULL;
}

/* TypeProto, in one piece or more -> ValueType("tensor", ...), ValueType("sequence", 0,
 * None), ... or None */
static PyObject *parse_type(ctx_t *c, const pieces_t *ps)
{
    pieces_t tensor;
    PyObject *other = NULL; /* borrowed */
    const uint8_t *s, *p, *end;
    Py_ssize_t n;
    uint32_t f, which = 0; /* the oneof member seen last */
    int wt, rc = 0;
    memset(&tensor, 0, sizeof(tensor));
    if (enter(c, SCHEMA[M_TypeProto].name) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < ps->count; i++) {
        piece(ps, i, &p, &end);
        cur_t r = cursor(M_TypeProto, p, end);
        EACH_KNOWN_FIELD(c, r, f, wt, rc, fail) {
            const char *field = NULL;
            PyObject *kind = NULL;
            switch (f) {
            case 1: field = "tensor_type"; break;
            case 4: field = "sequence_type"; kind = t_sequence; break;
            case 5: field = "map_type"; kind = t_map; break;
            case 7: field = "opaque_type"; kind = t_opaque; break;
            case 8: field = "sparse_tensor_type"; kind = t_sparse; break;
            case 9: field = "optional_type"; kind = t_optional; break;
            }
            if (field == NULL) {
                if (skip_field(c, &r, f, wt) < 0)
                    goto fail;
                continue;
            }
            if (get_len(&r, field, f, wt, &s, &n) < 0)
                goto fail;
            if (f == 1) { /* merged with the tensor_type before it, unless another member came between */
                if (pieces_add(&tensor, s, n) < 0)
                    goto fail;
            } else {
                /* the last member of the oneof wins; what it replaces was parsed all the same */
                for (Py_ssize_t k = 0; k < tensor.count; k++) {
                    const uint8_t *tp, *te;
                    piece(&tensor, k, &tp, &te);
                    if (check_message(c, M_TypeProto_Tensor, tp, te) < 0)
                        goto fail;
                }
                tensor.count = 0;
                if (check_message(c, known(r.m, f, wt)->sub, s, s + n) < 0)
                    goto fail;
                other = kind;
            }
            which = f;
        }
        if (rc < 0)
            goto fail;
    }
    PyObject *res;
    if (which == 1)
        res = parse_tensor_type(c, &tensor);
    else
        res = Py_NewRef(other ? other : Py_None);
    pieces_free(&tensor);
    c->depth--;
    return res;
fail:
    pieces_free(&tensor);
    c->depth--;
    return NULL;
}

/* ValueInfoProto -> Value(name, type) */
static PyObject *parse_value(ctx_t *c, const uint8_t *p, const uint8_t *end)
{
    cur_t r = cursor(M_ValueInfoProto, p, end);
    sref_t name = {NULL, 0};
    pieces_t types;
    PyObject *type = NULL;
    const uint8_t *s;
    Py_ssize_t n;
    uint32_t f;
    int wt, rc;
    memset(&types, 0, sizeof(types));
    if (enter(c, r.msg) < 0)
        return NULL;
    EACH_KNOWN_FIELD(c, r, f, wt, rc, fail) {
        if (f == 1) {
            if (get_len(&r, "name", f, wt, &name.s, &name.n) < 0)
                goto fail;
        } else if (f == 2) {
            if (get_len(&r, "type", f, wt, &s, &n) < 0 || pieces_add(&types, s, n) < 0)
                goto fail;
        } else if (skip_field(c, &r, f, wt) < 0)
            goto fail;
    }
    if (rc < 0)
        goto fail;
    if (types.count && (type = parse_type(c, &types)) == NULL)
        goto fail;
    pieces_free(&types);
    c->depth--;
    PyObject *items[2] = {sref_str(c, name), type ? type : Py_NewRef(Py_None)};
    return record(r_value, items, 2);
fail:
    pieces_free(&types);
    c->depth--;
    return NULL;
}

/* AttributeProto -> Attribute(name, type, raw, subgraphs: [GRAPH] for GRAPH and GRAPHS, else ()) */
static PyObject *parse_attr(ctx_t *c, const uint8_t *p, const uint8_t *end)
{
    cur_t r = cursor(M_AttributeProto, p, end);
    sref_t name = {NULL, 0};
    pieces_t g;
    int64_t type = 0;
    int n_graphs = 0;
    PyObject *graphs = NULL, *o = NULL;
    const uint8_t *s, *gp, *ge;
    Py_ssize_t n;
    uint64_t v;
    uint32_t f;
    int wt, rc;
    memset(&g, 0, sizeof(g));
    if (enter(c, r.msg) < 0)
        return NULL;
    EACH_KNOWN_FIELD(c, r, f, wt, rc, fail) {
        switch (f) {
        case 1:
            if (get_len(&r, "name", f, wt, &name.s, &name.n) < 0)
                goto fail;
            break;
        case 20:
            if (get_varint(&r, "type", f, wt, &v) < 0)
                goto fail;
            set_enum(r.m, f, v, &type);
            break;
        case 6:
            if (get_len(&r, "g", f, wt, &s, &n) < 0 || pieces_add(&g, s, n) < 0)
                goto fail;
            break;
        case 11:
            if (get_len(&r, "graphs", f, wt, &s, &n) < 0)
                goto fail;
            n_graphs++;
            break;
        default:
            if (skip_field(c, &r, f, wt) < 0)
                goto fail;
        }
    }
    if (rc < 0)
        goto fail;
    if (type == 5 && g.count > 1) {
        fail_at(&r, "g", 6, "appears twice (a graph in pieces is not read)");
        goto fail;
    }
    if (type == 5 || type == 10) {
        if ((graphs = PyList_New(0)) == NULL)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < g.count; i++) { /* parsed, or only checked as protobuf would */
        piece(&g, i, &gp, &ge);
        if (type != 5) {
            if (check_message(c, M_GraphProto, gp, ge) < 0)
                goto fail;
        } else if ((o = parse_graph(c, gp, ge)) == NULL || PyList_Append(graphs, o) < 0)
            goto fail;
        Py_CLEAR(o);
    }
    if (n_graphs) { /* a second walk, over fields checked by the first */
        cur_t again = cursor(M_AttributeProto, p, end);
        while ((rc = next_tag(&again, &f, &wt)) > 0) {
            if (f != 11 || wt != 2) {
                if (skip_unknown(c, &again, f, wt) < 0)
                    goto fail;
                continue;
            }
            if (get_len(&again, "graphs", f, wt, &s, &n) < 0)
                goto fail;
            if (type != 10) {
                if (check_message(c, M_GraphProto, s, s + n) < 0)
                    goto fail;
                continue;
            }
            if ((o = parse_graph(c, s, s + n)) == NULL || PyList_Append(graphs, o) < 0)
                goto fail;
            Py_CLEAR(o);
        }
        if (rc < 0)
            goto fail;
    }
    PyObject *items[4] = {sref_str(c, name), PyLong_FromLongLong(type),
                          PyBytes_FromStringAndSize((const char *)p, end - p),
                          graphs ? graphs : PyTuple_New(0)};
    pieces_free(&g);
    c->depth--;
    return record(r_attr, items, 4);
fail:
    Py_XDECREF(o);
    Py_XDECREF(graphs);
    pieces_free(&g);
    c->depth--;
    return NULL;
}

/* NodeProto -> Node(name, op_type, domain, inputs, outputs, attrs) */
static PyObject *parse_node(ctx_t *c, const uint8_t *p, const uint8_t *end)
{
    cur_t r = cursor(M_NodeProto, p, end);
    sref_t name = {NULL, 0}, op = {NULL, 0}, domain = {NULL, 0};
    Py_ssize_t ib = c->ins.n, ob = c->outs.n, ab = c->attrs.n;
    PyObject *ins = NULL, *outs = NULL, *attrs = NULL;
    const uint8_t *s;
    Py_ssize_t n;
    uint32_t f;
    int wt, rc;
    if (enter(c, r.msg) < 0)
        return NULL;
    EACH_KNOWN_FIELD(c, r, f, wt, rc, fail) {
        switch (f) {
        case 1:
            if (get_len(&r, "input", f, wt, &s, &n) < 0 || stk_push(&c->ins, mkstr(c, s, n)) < 0)
                goto fail;
            break;
        case 2:
            if (get_len(&r, "output", f, wt, &s, &n) < 0 ||
                stk_push(&c->outs, mkstr(c, s, n)) < 0)
                goto fail;
            break;
        case 3:
            if (get_len(&r, "name", f, wt, &name.s, &name.n) < 0)
                goto fail;
            break;
        case 4:
            if (get_len(&r, "op_type", f, wt, &op.s, &op.n) < 0)
                goto fail;
            break;
        case 7:
            if (get_len(&r, "domain", f, wt, &domain.s, &domain.n) < 0)
                goto fail;
            break;
        case 5:
            if (get_len(&r, "attribute", f, wt, &s, &n) < 0 ||
                stk_push(&c->attrs, parse_attr(c, s, s + n)) < 0)
                goto fail;
            break;
        default:
            if (skip_field(c, &r, f, wt) < 0)
                goto fail;
        }
    }
    if (rc < 0)
        goto fail;
    if ((ins = stk_tuple(&c->ins, ib)) == NULL || (outs = stk_tuple(&c->outs, ob)) == NULL ||
        (attrs = stk_tuple(&c->attrs, ab)) == NULL)
        goto fail;
    PyObject *items[6] = {sref_str(c, name), sref_str(c, op), sref_str(c, domain),
                          ins, outs, attrs};
    c->depth--;
    return record(r_node, items, 6);
fail:
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    Py_XDECREF(attrs);
    stk_pop(&c->ins, ib);
    stk_pop(&c->outs, ob);
    stk_pop(&c->attrs, ab);
    c->depth--;
    return NULL;
}

static PyObject *span_tuple(ctx_t *c, const uint8_t *s, Py_ssize_t n)
{
    return pair(PyLong_FromSsize_t(s - c->data), PyLong_FromSsize_t(n));
}

/* GraphProto -> dict (see parse_model's docstring) */
static PyObject *parse_graph(ctx_t *c, const uint8_t *p, const uint8_t *end)
{
    cur_t r = cursor(M_GraphProto, p, end);
    sref_t name = {NULL, 0};
    Py_ssize_t sparse = 0;
    PyObject *nodes = NULL, *inits = NULL, *ins = NULL, *outs = NULL, *vi = NULL,
             *spans = NULL, *res = NULL, *o = NULL, *tmp = NULL;
    PyObject *span_list = NULL; /* borrowed: the spans of span_key */
    uint32_t span_key = 0;
    int have_span_key = 0;
    const uint8_t *s;
    Py_ssize_t n;
    uint32_t f;
    int wt, rc;
    if (enter(c, r.msg) < 0)
        return NULL;
    if ((nodes = PyList_New(0)) == NULL || (inits = PyList_New(0)) == NULL ||
        (ins = PyList_New(0)) == NULL || (outs = PyList_New(0)) == NULL ||
        (vi = PyList_New(0)) == NULL || (spans = PyDict_New()) == NULL)
        goto fail;
    for (;;) {
        const uint8_t *start = r.p;
        PyObject *list = NULL;
        rc = next_tag(&r, &f, &wt);
        if (rc == 0)
            break;
        if (rc < 0)
            goto fail;
        /* spans are keyed by field number, but for entries of a known number that
         * protobuf keeps as unknown fields (another wire type): key 0, so that the
         * spans of field k stay the entries of its list */
        uint32_t key = f;
        if (known(r.m, f, wt) == NULL) {
            if (lookup(r.m, f) != NULL)
                key = 0;
            if (skip_unknown(c, &r, f, wt) < 0)
                goto fail;
        } else {
            switch (f) {
            case 1:
                if (get_len(&r, "node", f, wt, &s, &n) < 0)
                    goto fail;
                if (c->skip_nodes && c->depth == 2)
                    continue; /* parse_values: no node and no span of one */
                o = parse_node(c, s, s + n);
                list = nodes;
                break;
            case 2:
                if (get_len(&r, "name", f, wt, &name.s, &name.n) < 0)
                    goto fail;
                break;
            case 5:
                if (get_len(&r, "initializer", f, wt, &s, &n) < 0)
                    goto fail;
                o = parse_tensor(c, s, s + n);
                list = inits;
                break;
            case 11:
            case 12:
            case 13:
                if (get_len(&r, f == 11 ? "input" : f == 12 ? "output" : "value_info", f, wt,
                            &s, &n) < 0)
                    goto fail;
                o = parse_value(c, s, s + n);
                list = f == 11 ? ins : f == 12 ? outs : vi;
                break;
            case 15:
                if (get_len(&r, "sparse_initializer", f, wt, &s, &n) < 0 ||
                    check_message(c, M_SparseTensorProto, s, s + n) < 0)
                    goto fail;
                sparse++;
                break;
            default:
                if (skip_field(c, &r, f, wt) < 0)
                    goto fail;
            }
        }
        if (list != NULL) {
            if (o == NULL || PyList_Append(list, o) < 0)
                goto fail;
            Py_CLEAR(o);
        }
        if (!have_span_key || key != span_key) {
            if ((tmp = PyLong_FromUnsignedLong(key)) == NULL)
                goto fail;
            span_list = PyDict_GetItemWithError(spans, tmp);
            if (span_list == NULL) {
                if (PyErr_Occurred() || (o = PyList_New(0)) == NULL ||
                    PyDict_SetItem(spans, tmp, o) < 0)
                    goto fail;
                span_list = o; /* the dict holds it */
                Py_CLEAR(o);
            }
            Py_CLEAR(tmp);
            span_key = key;
            have_span_key = 1;
        }
        if ((o = span_tuple(c, start, r.p - start)) == NULL || PyList_Append(span_list, o) < 0)
            goto fail;
        Py_CLEAR(o);
    }
    {
        PyObject *items[8] = {sref_str(c, name), nodes, inits, ins, outs, vi,
                              PyLong_FromSsize_t(sparse), spans};
        nodes = inits = ins = outs = vi = spans = NULL; /* the record owns them */
        res = container_record(r_graph, items, 8);
    }
    if (res == NULL)
        goto fail;
    c->depth--;
    return res;
fail:
    Py_XDECREF(tmp);
    Py_XDECREF(o);
    Py_XDECREF(res);
    Py_XDECREF(nodes);
    Py_XDECREF(inits);
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    Py_XDECREF(vi);
    Py_XDECREF(spans);
    c->depth--;
    return NULL;
}

static PyObject *parse_model_data(ctx_t *c, const uint8_t *p, const uint8_t *end)
{
    cur_t r = cursor(M_ModelProto, p, end);
    uint64_t ir = 0;
    PyObject *opsets = NULL, *graph = NULL, *span = NULL, *res = NULL, *tmp = NULL;
    const uint8_t *s;
    Py_ssize_t n;
    uint32_t f;
    int wt, rc;
    if (enter(c, r.msg) < 0)
        return NULL;
    if ((opsets = PyList_New(0)) == NULL)
        goto fail;
    EACH_KNOWN_FIELD(c, r, f, wt, rc, fail) {
        switch (f) {
        case 1:
            if (get_varint(&r, "ir_version", f, wt, &ir) < 0)
                goto fail;
            break;
        case 8:
            if (get_len(&r, "opset_import", f, wt, &s, &n) < 0 ||
                (tmp = parse_opset(c, s, s + n)) == NULL || PyList_Append(opsets, tmp) < 0)
                goto fail;
            Py_CLEAR(tmp);
            break;
        case 7:
            if (get_len(&r, "graph", f, wt, &s, &n) < 0)
                goto fail;
            if (graph != NULL) {
                fail_at(&r, "graph", f, "appears twice (a graph in pieces is not read)");
                goto fail;
            }
            if ((graph = parse_graph(c, s, s + n)) == NULL || (span = span_tuple(c, s, n)) == NULL)
                goto fail;
            break;
        default:
            if (skip_field(c, &r, f, wt) < 0)
                goto fail;
        }
    }
    if (rc < 0)
        goto fail;
    {
        PyObject *items[5] = {PyLong_FromLongLong((long long)(int64_t)ir), opsets,
                              graph ? graph : Py_NewRef(Py_None),
                              span ? span : Py_NewRef(Py_None), PyLong_FromLong(0)};
        opsets = graph = span = NULL; /* the record owns them */
        res = container_record(r_model, items, 5);
    }
    if (res == NULL)
        goto fail;
    c->depth--;
    return res;
fail:
    Py_XDECREF(tmp);
    Py_XDECREF(res);
    Py_XDECREF(opsets);
    Py_XDECREF(graph);
    Py_XDECREF(span);
    c->depth--;
    return NULL;
}

static PyObject *parse(PyObject *arg, int skip_nodes)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    ctx_t c;
    memset(&c, 0, sizeof(c));
    c.skip_nodes = skip_nodes;
    const uint8_t *data = view.buf ? (const uint8_t *)view.buf : (const uint8_t *)"";
    c.data = data;
    PyObject *res = NULL;
    if (tab_grow(&c) == 0)
        res = parse_model_data(&c, data, data + view.len);
    if (res != NULL) {
        PyObject *count = PyLong_FromSize_t(c.not_utf8);
        if (count == NULL) {
            Py_CLEAR(res);
        } else { /* the record was made here: its last item is set once more */
            PyObject *old = PyStructSequence_GetItem(res, 4);
            PyStructSequence_SetItem(res, 4, count);
            Py_XDECREF(old);
        }
    }
    ctx_free(&c);
    PyBuffer_Release(&view);
    return res;
}

static PyObject *wire_parse_model(PyObject *self, PyObject *arg)
{
    return parse(arg, 0);
}

static PyObject *wire_parse_values(PyObject *self, PyObject *arg)
{
    return parse(arg, 1);
}

/* wire_types(message) -> {field number: tuple of the wire types protobuf accepts for it} */
static PyObject *wire_wire_types(PyObject *self, PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL)
        return NULL;
    const smsg_t *m = NULL;
    for (int k = 0; k < M_COUNT; k++)
        if (strcmp(SCHEMA[k].name, name) == 0)
            m = &SCHEMA[k];
    if (m == NULL) {
        PyErr_Format(PyExc_KeyError, "no message %R in onnx's schema", arg);
        return NULL;
    }
    PyObject *res = PyDict_New();
    if (res == NULL)
        return NULL;
    for (uint32_t num = 1; num <= m->max_num; num++) {
        int8_t at = m->index[num];
        if (at < 0)
            continue;
        const sfield_t *f = &m->fields[at];
        long wt = f->kind == K_VARINT ? 0 : f->kind == K_FIXED64 ? 1 : f->kind == K_FIXED32 ? 5 : 2;
        PyObject *types = (wt != 2 && f->repeated) ? Py_BuildValue("(ll)", wt, 2L)
                                                   : Py_BuildValue("(l)", wt);
        PyObject *key = PyLong_FromUnsignedLong(num);
        if (types == NULL || key == NULL || PyDict_SetItem(res, key, types) < 0) {
            Py_XDECREF(types);
            Py_XDECREF(key);
            Py_DECREF(res);
            return NULL;
        }
        Py_DECREF(types);
        Py_DECREF(key);
    }
    return res;
}

static PyMethodDef wire_methods[] = {
    {"parse_model", wire_parse_model, METH_O,
     "parse_model(data) -> Model\n\n"
     "A serialized ModelProto (any bytes-like object, not copied) as named records:\n"
     "Model(ir_version, opsets: [(domain, version)], graph: Graph or None, graph_span:\n"
     " (offset, length) of the graph's content in data, or None, not_utf8).\n"
     "Graph(name, nodes: [Node(name, op_type, domain, inputs, outputs, attrs)],\n"
     " initializers: [Initializer(name, data_type, dims, data_location, raw_bytes,\n"
     "   external_data)], inputs/outputs/value_info: [Value(name, type)],\n"
     " sparse_initializers: count, spans: {field number: [(offset, length)]} of every\n"
     " whole top-level entry). An attrs item is Attribute(name, type, raw AttributeProto\n"
     " bytes, subgraphs: the list of parsed Graphs for GRAPH and GRAPHS, else ()). A type is\n"
     " None or ValueType(kind, elem_type, shape or None): kind 'tensor', or 'sequence',\n"
     " 'map', 'optional', 'sparse_tensor', 'opaque' (elem_type 0, shape None); a dim is an\n"
     " int, a str or None. The records are tuples with named items. Strings that are\n"
     " not UTF-8 come back as bytes, and not_utf8 counts them (0: none anywhere).\n"
     " Malformed data raises ValueError."},
    {"parse_values", wire_parse_values, METH_O,
     "parse_values(data) -> Model\n\n"
     "parse_model(data) without the main graph's nodes: its nodes list is empty and its\n"
     "spans have no entry for them (a shape-inferred model's value infos, read fast)."},
    {"wire_types", wire_wire_types, METH_O,
     "wire_types(message) -> dict\n\n"
     "The wire types protobuf accepts for each field of an onnx message ('AttributeProto',\n"
     "'TensorProto.Segment', ...), from the schema this reader parses by: {field number:\n"
     "(wire type, ...)}, 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 (a repeated\n"
     "number also packed, 2). Another wire type for a known field makes it an unknown field."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT, "wire",
    "A serialized ONNX ModelProto parsed straight from the protobuf wire format.", -1,
    wire_methods};

/* the ValueType of a value that is not a tensor: (kind, 0, None), one object per kind */
static PyObject *kind_tuple(const char *kind)
{
    PyObject *items[3] = {PyUnicode_InternFromString(kind), PyLong_FromLong(0),
                          Py_NewRef(Py_None)};
    return record(r_type, items, 3);
}

#define FIELDS_END {NULL, NULL}
static PyStructSequence_Field node_fields[] = {
    {"name", NULL}, {"op_type", NULL}, {"domain", NULL},
    {"inputs", "tuple of str ('' for an omitted optional input)"},
    {"outputs", "tuple of str"}, {"attrs", "tuple of Attribute"}, FIELDS_END};
static PyStructSequence_Field attr_fields[] = {
    {"name", NULL}, {"type", "AttributeProto.AttributeType (5 GRAPH, 10 GRAPHS, ...)"},
    {"raw", "the serialized AttributeProto"},
    {"subgraphs", "list of Graph for GRAPH and GRAPHS, else ()"}, FIELDS_END};
static PyStructSequence_Field init_fields[] = {
    {"name", NULL}, {"data_type", "TensorProto.DataType"}, {"dims", "tuple of int"},
    {"data_location", "0 DEFAULT, 1 EXTERNAL"}, {"raw_bytes", "length of raw_data"},
    {"external_data", "tuple of (key, value)"}, FIELDS_END};
static PyStructSequence_Field value_fields[] = {
    {"name", NULL}, {"type", "ValueType or None"}, FIELDS_END};
static PyStructSequence_Field type_fields[] = {
    {"kind", "'tensor', 'sequence', 'map', 'optional', 'sparse_tensor' or 'opaque'"},
    {"elem_type", "TensorProto.DataType (0 unless a tensor)"},
    {"shape", "tuple of dims (int, str or None), or None"}, FIELDS_END};
static PyStructSequence_Field graph_fields[] = {
    {"name", NULL}, {"nodes", "list of Node"}, {"initializers", "list of Initializer"},
    {"inputs", "list of Value"}, {"outputs", "list of Value"}, {"value_info", "list of Value"},
    {"sparse_initializers", "how many"},
    {"spans", "{GraphProto field number: [(offset, length)]} of every whole top-level entry"},
    FIELDS_END};
static PyStructSequence_Field model_fields[] = {
    {"ir_version", NULL}, {"opsets", "list of (domain, version)"},
    {"graph", "Graph or None"},
    {"graph_span", "(offset, length) of the graph's content in the data, or None"},
    {"not_utf8", "how many strings were not UTF-8 (returned as bytes)"}, FIELDS_END};
static struct {
    PyTypeObject **slot;
    PyStructSequence_Desc desc;
} records[] = {
    {&r_node, {"graphmem.wire.Node", "A NodeProto.", node_fields, 6}},
    {&r_attr, {"graphmem.wire.Attribute", "An AttributeProto.", attr_fields, 4}},
    {&r_init, {"graphmem.wire.Initializer", "An initializer's TensorProto, without its data.",
               init_fields, 6}},
    {&r_value, {"graphmem.wire.Value", "A ValueInfoProto.", value_fields, 2}},
    {&r_type, {"graphmem.wire.ValueType", "A TypeProto.", type_fields, 3}},
    {&r_graph, {"graphmem.wire.Graph", "A GraphProto.", graph_fields, 8}},
    {&r_model, {"graphmem.wire.Model", "A ModelProto.", model_fields, 5}}};
static const char *record_names[] = {"Node", "Attribute", "Initializer", "Value", "ValueType",
                                     "Graph", "Model"};

PyMODINIT_FUNC PyInit_wire(void)
{
    if (s_tensor == NULL) {
        struct {
            PyObject **slot;
            const char *text;
        } keys[] = {{&s_tensor, "tensor"}};
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
            if ((*keys[i].slot = PyUnicode_InternFromString(keys[i].text)) == NULL)
                return NULL;
        for (size_t i = 0; i < sizeof(records) / sizeof(records[0]); i++)
            if ((*records[i].slot = PyStructSequence_NewType(&records[i].desc)) == NULL)
                return NULL;
        if ((t_sequence = kind_tuple("sequence")) == NULL || (t_map = kind_tuple("map")) == NULL ||
            (t_optional = kind_tuple("optional")) == NULL ||
            (t_sparse = kind_tuple("sparse_tensor")) == NULL ||
            (t_opaque = kind_tuple("opaque")) == NULL)
            return NULL;
    }
    PyObject *m = PyModule_Create(&wire_module);
    if (m == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(records) / sizeof(records[0]); i++)
        if (PyModule_AddObjectRef(m, record_names[i], (PyObject *)*records[i].slot) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    return m;
}
